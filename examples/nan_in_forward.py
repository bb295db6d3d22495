"""A training script whose loss turns NaN: a log of a value that reaches 0 deep inside the model."""

import torch
import torch.nn as nn


class LogFeatures(nn.Module):
    def forward(self, x):
        return torch.log(x)  # x can be 0 after the ReLU: log(0) = -inf


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), LogFeatures())
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.encoder(x))


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    x = torch.randn(32, 8)
    y = torch.randn(32, 1)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.4f}")
