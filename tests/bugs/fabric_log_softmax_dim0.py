"""Fabric image classifier: fabric.setup(model, optimizer) and setup_dataloaders, fabric.backward
for loss.backward, Adadelta + StepLR, log_softmax + nll_loss, a test pass in eval() + no_grad
with summed loss and an argmax accuracy counter.

Source: Lightning-AI/pytorch-lightning, examples/fabric/image_classifier/train_fabric.py, commit 7f0c3436cd3f6ad3753125672024fc415cbcb414.
Reduced: the script's Net at 12x12 input with channels 4/8 and hidden 16, random data, 3 train
batches, 1 test batch; torchmetrics' Accuracy replaced by the same argmax count.

Mutation: `F.log_softmax(..., dim=0)` in the model's forward: log-probabilities normalized over the batch instead of the classes.
Expected: warning silent.softmax_over_batch on the root model, at the `return F.log_softmax(...)` line in `Net.forward`.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

NEEDS = ("lightning",)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(8 * 4 * 4, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=0)  # <- bug


def build():
    from lightning.fabric import Fabric, seed_everything

    fabric = Fabric(accelerator="cpu", devices=1)
    seed_everything(1)
    train_loader = DataLoader(TensorDataset(torch.randn(24, 1, 12, 12), torch.randint(0, 10, (24,))), batch_size=8)
    test_loader = DataLoader(TensorDataset(torch.randn(8, 1, 12, 12), torch.randint(0, 10, (8,))), batch_size=8)
    train_loader, test_loader = fabric.setup_dataloaders(train_loader, test_loader)
    model = Net()
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    model, optimizer = fabric.setup(model, optimizer)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)

    def train():
        for epoch in range(1, 2):
            model.train()
            for batch_idx, (data, target) in enumerate(train_loader):
                optimizer.zero_grad()
                output = model(data)
                loss = F.nll_loss(output, target)
                fabric.backward(loss)
                optimizer.step()
            scheduler.step()
            model.eval()
            test_loss, correct = 0, 0
            with torch.no_grad():
                for data, target in test_loader:
                    output = model(data)
                    test_loss += F.nll_loss(output, target, reduction="sum").item()
                    correct += output.argmax(dim=1).eq(target).sum().item()
            test_loss = fabric.all_gather(test_loss).sum() / len(test_loader.dataset)

    # watch() is given the objects Fabric wraps: a watch() of Fabric's optimizer wrapper does not
    # see its steps (the wrapper delegates step() to the inner optimizer); noted for issue triage.
    return [model.module], [optimizer.optimizer], train


if __name__ == "__main__":
    build()[2]()
