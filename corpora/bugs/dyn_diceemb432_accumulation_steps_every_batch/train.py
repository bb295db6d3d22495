# Source: dice-group/dice-embeddings, dicee/trainer/torch_trainer.py (TorchTrainer._run_batch, _run_epoch, fit, compute_forward_loss_backward), dicee/models/base_model.py (BaseKGE.training_step, configure_optimizers), dicee/models/real.py (DistMult), commit 01bef955a3673a6890ee09d5a2d3ec0ffb7ef12d
# Report: https://github.com/dice-group/dice-embeddings/issues/432
# dicee's single-node TorchTrainer training a DistMult knowledge-graph embedding model with the
# KvsAll scoring technique (each (head, relation) pair is scored against every entity with a
# multi-hot target and BCE-with-logits), Adam, gradient_accumulation_steps=4. The knowledge graph
# is synthetic (64 entities, 4 relations following simple modular rules plus noise); psutil memory
# reporting and callbacks are removed, the per-batch print is reduced to a per-epoch line.
import time
from types import SimpleNamespace
from typing import Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class KvsAll(Dataset):
    def __init__(self, triples, num_entities):
        pairs = {}
        for h, r, t in triples:
            pairs.setdefault((h, r), []).append(t)
        self.train_data = torch.tensor(list(pairs.keys()), dtype=torch.long)
        self.train_target = []
        for key in pairs:
            y = torch.zeros(num_entities)
            y[pairs[key]] = 1.0
            self.train_target.append(y)
        self.train_target = torch.stack(self.train_target)

    def __len__(self):
        return len(self.train_data)

    def __getitem__(self, idx):
        return self.train_data[idx], self.train_target[idx]


class DistMult(torch.nn.Module):
    def __init__(self, args):
        super().__init__()
        self.name = 'DistMult'
        self.learning_rate = args.lr
        self.entity_embeddings = torch.nn.Embedding(args.num_entities, args.embedding_dim)
        self.relation_embeddings = torch.nn.Embedding(args.num_relations, args.embedding_dim)
        torch.nn.init.xavier_normal_(self.entity_embeddings.weight.data)
        torch.nn.init.xavier_normal_(self.relation_embeddings.weight.data)
        self.loss_function = torch.nn.BCEWithLogitsLoss()
        self.loss_history = []

    def forward_k_vs_all(self, x: torch.LongTensor):
        emb_head_real = self.entity_embeddings(x[:, 0])
        emb_rel_real = self.relation_embeddings(x[:, 1])
        return torch.mm(emb_head_real * emb_rel_real, self.entity_embeddings.weight.transpose(1, 0))

    def forward(self, x):
        return self.forward_k_vs_all(x)

    def training_step(self, batch, batch_idx=None):
        x_batch, y_batch = batch
        yhat_batch = self.forward(x_batch)
        return self.loss_function(yhat_batch, y_batch)

    def configure_optimizers(self, parameters=None):
        if parameters is None:
            parameters = self.parameters()
        return torch.optim.Adam(parameters, lr=self.learning_rate)


class TorchTrainer:
    def __init__(self, args, callbacks):
        self.attributes = args
        self.callbacks = callbacks
        self.use_closure = None
        self.loss_function = None
        self.optimizer = None
        self.model = None
        self.train_dataloaders = None
        torch.manual_seed(self.attributes.random_seed)
        self.device = 'cpu'

    def _run_batch(self, i: int, x_batch, y_batch) -> float:
        if self.attributes.gradient_accumulation_steps > 1:
            # (1) Update parameters every gradient_accumulation_steps mini-batch.
            if i % self.attributes.gradient_accumulation_steps == 0:
                self.optimizer.zero_grad(set_to_none=True)
        else:
            # (2) Do not accumulate gradient, zero the gradients per batch.
            self.optimizer.zero_grad(set_to_none=True)
        # (3) Loss Forward and Backward w.r.t the batch.
        return self.compute_forward_loss_backward(x_batch, y_batch)

    def _run_epoch(self, epoch: int) -> float:
        epoch_loss = 0
        i = 0
        for i, batch in enumerate(self.train_dataloaders):
            # (1) Extract Input and Outputs and set them on the dice
            x_batch, y_batch = self.extract_input_outputs_set_device(batch)
            # (2) Forward-Backward-Update.
            batch_loss = self._run_batch(i, x_batch, y_batch)
            epoch_loss += batch_loss
        return epoch_loss / (i + 1)

    def fit(self, *args, train_dataloaders, **kwargs) -> None:
        assert len(args) == 1
        model, = args
        self.model = model
        self.model.to(self.device)
        self.train_dataloaders = train_dataloaders
        self.loss_function = model.loss_function
        self.optimizer = self.model.configure_optimizers()
        self.training_step = self.model.training_step
        self.use_closure = False

        print(f'NumOfDataPoints:{len(self.train_dataloaders.dataset)} '
              f'| NumOfEpochs:{self.attributes.max_epochs} '
              f'| LearningRate:{self.model.learning_rate} '
              f'| BatchSize:{self.train_dataloaders.batch_size} '
              f'| EpochBatchsize:{len(train_dataloaders)} '
              f'| GradientAccumulation:{self.attributes.gradient_accumulation_steps}')
        for epoch in range(self.attributes.max_epochs):
            start_time = time.time()
            avg_epoch_loss = self._run_epoch(epoch)
            adam_steps = self.optimizer.state[self.model.entity_embeddings.weight]['step']
            print(f"Epoch:{epoch + 1} "
                  f"| Loss:{avg_epoch_loss:.8f} "
                  f"| Adam steps so far:{int(adam_steps)} "
                  f"| Runtime:{(time.time() - start_time) / 60:.3f}mins")
            self.model.loss_history.append(avg_epoch_loss)

    def compute_forward_loss_backward(self, x_batch: torch.Tensor, y_batch: torch.Tensor) -> torch.Tensor:
        if self.use_closure:
            batch_loss = self.optimizer.step(closure=lambda: self.loss_function(self.model(x_batch), y_batch))
            return batch_loss
        else:
            batch_loss = self.training_step(batch=(x_batch, y_batch))
            batch_loss.backward()
            self.optimizer.step()
            return batch_loss.item()

    def extract_input_outputs_set_device(self, batch: list) -> Tuple:
        if len(batch) == 2:
            x_batch, y_batch = batch
            return x_batch.to(self.device), y_batch.to(self.device)
        raise ValueError('Unexpected batch shape..')


def synthetic_kg(num_entities, rng):
    triples = set()
    for h in range(num_entities):
        triples.add((h, 0, (h + 1) % num_entities))
        triples.add((h, 1, (h * 3) % num_entities))
        triples.add((h, 2, (h + num_entities // 2) % num_entities))
        triples.add((h, 3, h))
    for _ in range(num_entities):
        triples.add((int(rng.randint(num_entities)), int(rng.randint(4)), int(rng.randint(num_entities))))
    return sorted(triples)


@torch.no_grad()
def hits_at_1(model, dataset):
    scores = model(dataset.train_data)
    pred = scores.argmax(dim=1)
    return dataset.train_target[torch.arange(len(pred)), pred].mean().item()


def main():
    args = SimpleNamespace(random_seed=1, gradient_accumulation_steps=4, max_epochs=10, lr=0.05,
                           num_entities=64, num_relations=4, embedding_dim=32, batch_size=16)
    rng = np.random.RandomState(0)
    dataset = KvsAll(synthetic_kg(args.num_entities, rng), args.num_entities)
    trainer = TorchTrainer(args, callbacks=[])
    model = DistMult(args)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    trainer.fit(model, train_dataloaders=loader)
    print(f"train hits@1 {hits_at_1(model, dataset):.3f}")


if __name__ == "__main__":
    main()
