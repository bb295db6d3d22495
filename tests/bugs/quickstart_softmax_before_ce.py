"""Quickstart: a Flatten + Linear/ReLU stack, CrossEntropyLoss, SGD, train() with model.train()
and loss.item() logging, test() with model.eval(), no_grad, summed loss and argmax accuracy.

Source: pytorch/tutorials, beginner_source/basics/quickstart_tutorial.py,
commit afcd669d56554c2ef46f2da92edbfaf8c54043ec.
Reduced: 8x8 images, hidden 32, 3 train batches of 8 and 1 test batch, 2 epochs.

Mutation: `nn.Softmax(dim=1)` appended to the model, whose output goes to `nn.CrossEntropyLoss`.
Expected: error silent.probabilities_to_cross_entropy naming the nn.Softmax module linear_relu_stack.5, at `loss = loss_fn(pred, y)`.
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(nn.Linear(8 * 8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                                               nn.Linear(32, 10), nn.Softmax(dim=1))

    def forward(self, x):
        x = self.flatten(x)
        return self.linear_relu_stack(x)


def build():
    torch.manual_seed(0)
    train_dataloader = DataLoader(TensorDataset(torch.rand(24, 1, 8, 8), torch.randint(0, 10, (24,))), batch_size=8)
    test_dataloader = DataLoader(TensorDataset(torch.rand(8, 1, 8, 8), torch.randint(0, 10, (8,))), batch_size=8)
    model = NeuralNetwork()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def train_loop(dataloader, model, loss_fn, optimizer):
        size = len(dataloader.dataset)
        model.train()
        for batch, (X, y) in enumerate(dataloader):
            pred = model(X)
            loss = loss_fn(pred, y)  # <- bug
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if batch % 2 == 0:
                loss, current = loss.item(), (batch + 1) * len(X)
                print(f"loss: {loss:>7f}  [{current:>5d}/{size:>5d}]")

    def test_loop(dataloader, model, loss_fn):
        model.eval()
        size, num_batches = len(dataloader.dataset), len(dataloader)
        test_loss, correct = 0, 0
        with torch.no_grad():
            for X, y in dataloader:
                pred = model(X)
                test_loss += loss_fn(pred, y).item()
                correct += (pred.argmax(1) == y).type(torch.float).sum().item()
        return test_loss / num_batches, correct / size

    def train():
        for t in range(2):
            train_loop(train_dataloader, model, loss_fn, optimizer)
            test_loop(test_dataloader, model, loss_fn)

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
