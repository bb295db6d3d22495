"""The DDP tutorial series' Trainer class (single-process version): _run_batch (zero_grad, forward,
cross_entropy, backward, step), _run_epoch over a shuffled DataLoader, _save_checkpoint of
model.state_dict() every save_every epochs.

Source: pytorch/examples, distributed/ddp-tutorial-series/single_gpu.py, commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
Changed: the script trains nn.Linear(20, 1) with F.cross_entropy on one-column float targets,
a softmax over a single class: the loss is always 0 and every gradient is exactly zero (torchtriage
reports gradient.zero on the original). Here the model has 4 outputs and the targets are class
indices, which is what the tutorial means to show.
Reduced: 64 random samples, batch 16, 2 epochs; the checkpoint goes to an in-memory buffer.
"""

import io

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every):
        self.model = model
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = F.cross_entropy(output, targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        for source, targets in self.train_data:
            self._run_batch(source, targets)

    def _save_checkpoint(self, epoch):
        ckp = self.model.state_dict()
        torch.save(ckp, io.BytesIO())

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            self._run_epoch(epoch)
            if epoch % self.save_every == 0:
                self._save_checkpoint(epoch)


def build():
    torch.manual_seed(0)
    train_set = [(torch.rand(20), torch.randint(0, 4, ()).item()) for _ in range(64)]
    model = torch.nn.Linear(20, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    train_data = DataLoader(train_set, batch_size=16, shuffle=True)
    trainer = Trainer(model, train_data, optimizer, save_every=1)

    def train():
        trainer.train(2)

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
