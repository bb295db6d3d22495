# Source: NTMC-Community/MatchZoo-py, matchzoo/losses/rank_cross_entropy_loss.py (RankCrossEntropyLoss), matchzoo/trainers/trainer.py (Trainer._backward, run, _run_epoch, evaluate), commit c187435907945344363c5821e3688a1d466bd2a2
# Report: https://github.com/NTMC-Community/MatchZoo-py/pull/69
# MatchZoo-py ranking: a text-matching model scores (query, document) pairs; training batches
# hold groups of one relevant document followed by num_neg sampled negatives, and
# RankCrossEntropyLoss is a softmax cross entropy over each group's scores. The Trainer's
# epoch loop (sum of criterions, backward, optional clipping, step, validation with MAP per
# query) is kept; DUET / WikiQA + GloVe become a small embedding-interaction scorer on
# synthetic token queries where the relevant document shares the query's topic tokens.
import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


class RankCrossEntropyLoss(nn.Module):
    """Creates a criterion that measures rank cross entropy loss."""

    __constants__ = ['num_neg']

    def __init__(self, num_neg: int = 1):
        super().__init__()
        self.num_neg = num_neg

    def forward(self, y_pred: torch.Tensor, y_true: torch.Tensor):
        logits = y_pred[::(self.num_neg + 1), :]
        labels = y_true[::(self.num_neg + 1), :]
        for neg_idx in range(self.num_neg):
            neg_logits = y_pred[(neg_idx + 1)::(self.num_neg + 1), :]
            neg_labels = y_true[(neg_idx + 1)::(self.num_neg + 1), :]
            logits = torch.cat((logits, neg_logits), dim=-1)
            labels = torch.cat((labels, neg_labels), dim=-1)
        return -torch.mean(
            torch.sum(labels * torch.log(F.softmax(logits, dim=-1)), dim=-1)
        )

    @property
    def num_neg(self):
        """`num_neg` getter."""
        return self._num_neg

    @num_neg.setter
    def num_neg(self, value):
        """`num_neg` setter."""
        self._num_neg = value


class MatchModel(nn.Module):
    """Embedding + exact-match interaction + MLP scorer (stands in for DUET's local/distributed parts)."""
    def __init__(self, vocab=400, dim=32):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.mlp = nn.Sequential(nn.Linear(3 * dim + 1, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, inputs):
        q, d = inputs['text_left'], inputs['text_right']
        eq, ed = self.embedding(q).mean(1), self.embedding(d).mean(1)
        exact = (q.unsqueeze(2) == d.unsqueeze(1)).float().sum((1, 2)).unsqueeze(1)
        return self.mlp(torch.cat([eq, ed, eq * ed, exact], dim=-1))


def make_pack(n_queries, g, n_docs=6):
    """Each query: 5 tokens of one topic; 1 relevant doc (shares topic tokens), n_docs-1 irrelevant."""
    q_all, d_all, y_all, id_all = [], [], [], []
    for qi in range(n_queries):
        topic = int(torch.randint(0, 40, (1,), generator=g))
        q = topic * 10 + torch.randint(0, 10, (5,), generator=g)
        if float(torch.rand(1, generator=g)) < 0.15:   # annotation noise: the marked answer is off-topic
            topic = (topic + 7) % 40
        for j in range(n_docs):
            if j == 0:
                d = torch.cat([topic * 10 + torch.randint(0, 10, (6,), generator=g), torch.randint(0, 400, (6,), generator=g)])
            else:
                other = (topic + int(torch.randint(1, 40, (1,), generator=g))) % 40
                d = torch.cat([other * 10 + torch.randint(0, 10, (6,), generator=g), torch.randint(0, 400, (6,), generator=g)])
            q_all.append(q); d_all.append(d); y_all.append(1.0 if j == 0 else 0.0); id_all.append(qi)
    return torch.stack(q_all), torch.stack(d_all), torch.tensor(y_all).unsqueeze(1), np.array(id_all)


class PairDataLoader:
    """Ranking mode: for each relevant pair, num_neg negatives of the same query, batch of groups."""
    def __init__(self, pack, num_neg, batch_size, g):
        self.q, self.d, self.y, self.ids = pack
        self.num_neg, self.batch_size, self.g = num_neg, batch_size, g
        self.n_queries = int(self.ids.max()) + 1

    def __len__(self):
        return (self.n_queries + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        order = torch.randperm(self.n_queries, generator=self.g)
        for b in range(len(self)):
            rows = []
            for qi in order[b * self.batch_size:(b + 1) * self.batch_size].tolist():
                base = qi * 6
                negs = (torch.randperm(5, generator=self.g)[:self.num_neg] + 1 + base).tolist()
                rows += [base] + negs
            rows = torch.tensor(rows)
            yield {'text_left': self.q[rows], 'text_right': self.d[rows]}, self.y[rows]


def mean_average_precision(ids, y_true, y_pred):
    aps = []
    for qi in np.unique(ids):
        m = ids == qi
        order = np.argsort(-y_pred[m], kind="stable")
        rel = y_true[m][order]
        hits = np.cumsum(rel)
        aps.append(float(np.sum(hits / np.arange(1, len(rel) + 1) * rel) / max(rel.sum(), 1)))
    return float(np.mean(aps))


class Trainer:
    def __init__(self, model, optimizer, trainloader, validpack, epochs, criterions, clip_norm=None):
        self._model, self._optimizer = model, optimizer
        self._trainloader, self._validpack = trainloader, validpack
        self._epochs, self._criterions, self._clip_norm = epochs, criterions, clip_norm
        self._start_epoch, self._iteration = 1, 0
        self._validate_interval = len(trainloader)

    def _backward(self, loss):
        self._optimizer.zero_grad()
        loss.backward()
        if self._clip_norm:
            nn.utils.clip_grad_norm_(
                self._model.parameters(), self._clip_norm
            )
        self._optimizer.step()

    def run(self):
        self._model.train()
        for epoch in range(self._start_epoch, self._epochs + 1):
            self._epoch = epoch
            self._run_epoch()

    def _run_epoch(self):
        losses = []
        for step, (inputs, target) in enumerate(self._trainloader):
            outputs = self._model(inputs)
            # Caculate all losses and sum them up
            loss = torch.sum(
                *[c(outputs, target) for c in self._criterions]
            )
            self._backward(loss)
            losses.append(loss.item())
            # Run validate
            self._iteration += 1
            if self._iteration % self._validate_interval == 0:
                result = self.evaluate(self._validpack)
                print(f'[Epoch {self._epoch} Iter-{self._iteration} Loss-{np.mean(losses):.3f}]: '
                      f'Validation: map: {result["map"]:.4f}  max |score|: {result["max_abs"]:.1f}')

    def evaluate(self, pack):
        q, d, y, ids = pack
        with torch.no_grad():
            self._model.eval()
            y_pred = self._model({'text_left': q, 'text_right': d}).squeeze(1).numpy()
            self._model.train()
        return {'map': mean_average_precision(ids, y.squeeze(1).numpy(), y_pred), 'max_abs': float(np.abs(y_pred).max())}


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    train_pack, valid_pack = make_pack(400, g), make_pack(100, g)
    model = MatchModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    trainloader = PairDataLoader(train_pack, num_neg=2, batch_size=20, g=g)
    trainer = Trainer(model, optimizer, trainloader, valid_pack, epochs=16,
                      criterions=[RankCrossEntropyLoss(num_neg=2)])
    trainer.run()


if __name__ == '__main__':
    main()
