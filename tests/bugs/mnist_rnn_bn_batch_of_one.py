"""MNIST with an LSTM over image rows: the last time step through BatchNorm1d and Dropout2d,
log_softmax + nll_loss, Adadelta + StepLR, a test pass in eval() + no_grad with summed loss and
argmax accuracy.

Source: pytorch/examples, mnist_rnn/main.py, commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
Reduced: 8x8 images read as 8 rows of 8, hidden 16, 3 train batches, 1 test batch.

Mutation: a training set of 17 samples in batches of 8 without `drop_last=True`: the last batch holds one sample and BatchNorm1d raises.
Expected: error shape.batchnorm_one_sample in module `batchnorm`, at the innermost user line `self.batchnorm(output)`.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.rnn = nn.LSTM(input_size=8, hidden_size=16, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(16)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(16, 12)
        self.fc2 = nn.Linear(12, 10)

    def forward(self, input):
        input = input.reshape(-1, 8, 8)
        output, hidden = self.rnn(input)
        output = output[:, -1, :]
        output = self.batchnorm(output)  # <- bug
        output = self.dropout1(output)
        output = self.fc1(output)
        output = F.relu(output)
        output = self.dropout2(output)
        output = self.fc2(output)
        return F.log_softmax(output, dim=1)


def build():
    torch.manual_seed(1)
    train_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(17, 1, 8, 8), torch.randint(0, 10, (17,))), batch_size=8)
    test_loader = [(torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,)))]
    model = Net()
    optimizer = optim.Adadelta(model.parameters(), lr=0.1)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)

    def train():
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
        model.eval()
        test_loss, correct = 0, 0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                pred = output.argmax(dim=1, keepdim=True)
                correct += pred.eq(target.view_as(pred)).sum().item()
        scheduler.step()

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
