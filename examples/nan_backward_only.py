"""The forward pass is finite, the gradient is not: sqrt of a distance that is exactly 0."""

import torch
import torch.nn as nn


class Distance(nn.Module):
    def forward(self, a, b):
        return torch.sqrt(((a - b) ** 2).sum(-1, keepdim=True))  # d sqrt/dx at 0 is inf


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.dist = Distance()

    def forward(self, x, y):
        return self.dist(self.enc(x), self.enc(y))


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(8, 4)
    y = x.clone()
    y[4:] += 1  # half of the pairs are identical: distance 0
    loss = model(x, y).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.4f}")
