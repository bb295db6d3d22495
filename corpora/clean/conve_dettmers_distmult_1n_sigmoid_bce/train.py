# Source: TimDettmers/ConvE, model.py (DistMult, ConvE) + main.py (training loop with label smoothing) + evaluation.py (ranking_and_hits), commit 2a2e096aa9b14672aef7ec9c7c21522248e7f7e7
# DistMult knowledge-graph embedding as trained by main.py at this commit (ConvE defined, its construction commented
# out as in the original): 1-N scoring against every entity, sigmoid + BCELoss on label-smoothed multi-hot targets;
# filtered MRR / Hits@10.
# Suspicious-looking but correct patterns kept from the original:
#   - F.sigmoid + nn.BCELoss instead of BCEWithLogitsLoss; targets are not 0/1 but label-smoothed
#     ((1-eps)*y + 1/num_entities), so the loss never reaches 0
#   - padding_idx=0 on the entity and relation tables although 0 is never padding here (row 0 is a real
#     entity whose embedding is frozen at its xavier init value by padding_idx: its gradient is always 0)
#   - an unused ConvE class (with a bare register_parameter bias) stays defined next to the model that is trained
#   - the score matrix multiplies by emb_e.weight.transpose: every entity row gets gradient every step
#   - complete batches only (incomplete last batch dropped by the batcher, as ConvE's view(Config.batch_size) needs)
#   - dropout applied to the looked-up embeddings (inp_drop), weight_decay=0 Adam
#   - evaluation sets the scores of the other known true tails to 0 (filtered setting) in place
# Adaptation: spodernet pipeline/batcher and Config replaced by a SimpleNamespace + numpy batcher (random order,
# complete batches only); FB15k-237 replaced by a synthetic KG (300 entities, 8 relations + reciprocals, tails
# linking entity types); CUDA, saving and the dev/test split of evaluation reduced; lr 0.03, 20 epochs.
from types import SimpleNamespace

import numpy as np
import torch
from torch.nn import functional as F, Parameter
from torch.nn.init import xavier_normal_

Config = SimpleNamespace(embedding_dim=32, batch_size=128, input_dropout=0.2, dropout=0.3,
                         feature_map_dropout=0.2, use_bias=True, learning_rate=0.03, L2=0.0,
                         label_smoothing_epsilon=0.1)


class DistMult(torch.nn.Module):
    def __init__(self, num_entities, num_relations):
        super(DistMult, self).__init__()
        self.emb_e = torch.nn.Embedding(num_entities, Config.embedding_dim, padding_idx=0)
        self.emb_rel = torch.nn.Embedding(num_relations, Config.embedding_dim, padding_idx=0)
        self.inp_drop = torch.nn.Dropout(Config.input_dropout)
        self.loss = torch.nn.BCELoss()

    def init(self):
        xavier_normal_(self.emb_e.weight.data)
        xavier_normal_(self.emb_rel.weight.data)

    def forward(self, e1, rel):
        e1_embedded= self.emb_e(e1)
        rel_embedded= self.emb_rel(rel)
        e1_embedded = e1_embedded.view(-1, Config.embedding_dim)
        rel_embedded = rel_embedded.view(-1, Config.embedding_dim)

        e1_embedded = self.inp_drop(e1_embedded)
        rel_embedded = self.inp_drop(rel_embedded)

        pred = torch.mm(e1_embedded*rel_embedded, self.emb_e.weight.transpose(1,0))
        pred = F.sigmoid(pred)

        return pred


class ConvE(torch.nn.Module):
    def __init__(self, num_entities, num_relations):
        super(ConvE, self).__init__()
        self.emb_e = torch.nn.Embedding(num_entities, Config.embedding_dim, padding_idx=0)
        self.emb_rel = torch.nn.Embedding(num_relations, Config.embedding_dim, padding_idx=0)
        self.inp_drop = torch.nn.Dropout(Config.input_dropout)
        self.hidden_drop = torch.nn.Dropout(Config.dropout)
        self.feature_map_drop = torch.nn.Dropout2d(Config.feature_map_dropout)
        self.loss = torch.nn.BCELoss()

        self.conv1 = torch.nn.Conv2d(1, 32, (3, 3), 1, 0, bias=Config.use_bias)
        self.bn0 = torch.nn.BatchNorm2d(1)
        self.bn1 = torch.nn.BatchNorm2d(32)
        self.bn2 = torch.nn.BatchNorm1d(Config.embedding_dim)
        self.register_parameter('b', Parameter(torch.zeros(num_entities)))
        self.fc = torch.nn.Linear(1152,Config.embedding_dim)
        print(num_entities, num_relations)

    def init(self):
        xavier_normal_(self.emb_e.weight.data)
        xavier_normal_(self.emb_rel.weight.data)

    def forward(self, e1, rel):
        e1_embedded= self.emb_e(e1).view(Config.batch_size, 1, 4, 8)
        rel_embedded = self.emb_rel(rel).view(Config.batch_size, 1, 4, 8)

        stacked_inputs = torch.cat([e1_embedded, rel_embedded], 2)

        stacked_inputs = self.bn0(stacked_inputs)
        x= self.inp_drop(stacked_inputs)
        x= self.conv1(x)
        x= self.bn1(x)
        x= F.relu(x)
        x = self.feature_map_drop(x)
        x = x.view(Config.batch_size, -1)
        x = self.fc(x)
        x = self.hidden_drop(x)
        x = self.bn2(x)
        x = F.relu(x)
        x = torch.mm(x, self.emb_e.weight.transpose(1,0))
        x += self.b.expand_as(x)
        pred = F.sigmoid(x)

        return pred


def make_kg(num_entities=300, num_base_rel=8, seed=0):
    """ Synthetic KG: entities fall in 20 types; relation r links type k to type (k*3 + r) % 20; reciprocals added. """
    rng = np.random.RandomState(seed)
    etype = rng.randint(20, size=num_entities)
    members = {k: np.where(etype == k)[0] for k in range(20)}
    triples = set()
    for r in range(num_base_rel):
        for e in rng.choice(np.arange(1, num_entities), size=150, replace=False):
            tails = members[(etype[e] * 3 + r) % 20]
            for t in rng.choice(tails, size=min(2, len(tails)), replace=False):
                triples.add((int(e), r, int(t)))
    triples = sorted(triples)
    full = [(h, r, t) for h, r, t in triples] + [(t, r + num_base_rel, h) for h, r, t in triples]
    rng.shuffle(full)
    n_test = 200
    test, train = full[:n_test], full[n_test:]
    e1rel_to_e2_train, e1rel_to_e2_full = {}, {}
    for h, r, t in train:
        e1rel_to_e2_train.setdefault((h, r), set()).add(t)
    for h, r, t in full:
        e1rel_to_e2_full.setdefault((h, r), set()).add(t)
    return e1rel_to_e2_train, e1rel_to_e2_full, test, num_entities, 2 * num_base_rel


def ranking_and_hits(model, test, e1rel_to_e2_full, name):
    hits10, ranks = [], []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(test) - Config.batch_size + 1, Config.batch_size):
            chunk = test[i:i + Config.batch_size]
            e1 = torch.tensor([[h] for h, _, _ in chunk])
            rel = torch.tensor([[r] for _, r, _ in chunk])
            pred = model.forward(e1, rel)
            for j, (h, r, t) in enumerate(chunk):
                target_value = pred[j, t].item()
                filter_idx = list(e1rel_to_e2_full[(h, r)])
                pred[j][filter_idx] = 0.0
                pred[j][t] = target_value
            max_values, argsort = torch.sort(pred, 1, descending=True)
            argsort = argsort.numpy()
            for j, (h, r, t) in enumerate(chunk):
                rank = np.where(argsort[j] == t)[0][0]
                ranks.append(rank + 1)
                hits10.append(1.0 if rank <= 9 else 0.0)
    mrr = float(np.mean(1. / np.array(ranks)))
    print('{0}: Hits @10: {1:.4f}  Mean rank: {2:.1f}  MRR: {3:.4f}'.format(name, np.mean(hits10), np.mean(ranks), mrr))
    return mrr


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    epochs = 20
    e1rel_to_e2_train, e1rel_to_e2_full, test, num_entities, num_relations = make_kg()
    keys = sorted(e1rel_to_e2_train)

    #model = ConvE(num_entities, num_relations)
    model = DistMult(num_entities, num_relations)
    model.init()

    mrr0 = ranking_and_hits(model, test, e1rel_to_e2_full, 'init_evaluation')
    opt = torch.optim.Adam(model.parameters(), lr=Config.learning_rate, weight_decay=Config.L2)
    for epoch in range(epochs):
        model.train()
        order = np.random.permutation(len(keys))
        losses = []
        for i in range(0, len(order) - Config.batch_size + 1, Config.batch_size):
            batch = [keys[k] for k in order[i:i + Config.batch_size]]
            opt.zero_grad()
            e1 = torch.tensor([[h] for h, _ in batch])
            rel = torch.tensor([[r] for _, r in batch])
            e2_multi = torch.zeros(Config.batch_size, num_entities)
            for j, k in enumerate(batch):
                e2_multi[j, list(e1rel_to_e2_train[k])] = 1.0
            # label smoothing
            e2_multi = ((1.0-Config.label_smoothing_epsilon)*e2_multi) + (1.0/e2_multi.size(1))

            pred = model.forward(e1, rel)
            loss = model.loss(pred, e2_multi)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        print('epoch {0} loss {1:.5f}'.format(epoch, np.mean(losses)))
        model.eval()
        mrr = ranking_and_hits(model, test, e1rel_to_e2_full, 'dev_evaluation')
    print('[summary] filtered_MRR first={:.4f} last={:.4f} increased={}'.format(mrr0, mrr, mrr > mrr0))


if __name__ == '__main__':
    main()
