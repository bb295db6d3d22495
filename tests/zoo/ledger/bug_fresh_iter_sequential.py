# The iterator is rebuilt inside a while loop over a loader that does not shuffle: each step
# trains on the same first batch.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def train(loader, model, opt, steps):
    done = 0
    while done < steps:
        batches = iter(loader)  # HERE
        x, target = next(batches)
        out = model(x)
        loss = ((out - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        done += 1


torch.manual_seed(0)
X = torch.randn(300, 4)
Y = X.sum(1, keepdim=True)
loader = DataLoader(TensorDataset(X, Y), batch_size=20)
net = nn.Linear(4, 1)
train(loader, net, torch.optim.SGD(net.parameters(), lr=0.05), 40)
