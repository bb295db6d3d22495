"""MNIST CNN classifier: log_softmax + nll_loss, Adadelta, StepLR, eval() + no_grad test pass.

Source: pytorch/examples, mnist/main.py, commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
Reduced: 12x12 single-channel images, 8 channels, random data, 3 train batches + 1 test batch.

Mutation: one TensorDataset split with `random_split` into train/test, but the training DataLoader built over the whole dataset: the test images are trained on.
Expected: error data.heldout_trained at the `random_split(...)` line.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset, random_split


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(8 * 4 * 4, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def build():
    torch.manual_seed(1)
    dataset = TensorDataset(torch.randn(40, 1, 12, 12), torch.randint(0, 10, (40,)))
    train_set, test_set = random_split(dataset, [24, 16])  # <- bug
    train_loader = DataLoader(dataset, batch_size=8, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=16, shuffle=False)
    model = Net()
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)

    def train_epoch():
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            if batch_idx % 2 == 0:
                print("loss", loss.item())

    def test():
        model.eval()
        test_loss = 0
        correct = 0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                pred = output.argmax(dim=1, keepdim=True)
                correct += pred.eq(target.view_as(pred)).sum().item()
        return test_loss / len(test_loader.dataset), correct

    def train():
        for epoch in range(1, 3):
            train_epoch()
            test()
            scheduler.step()

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
