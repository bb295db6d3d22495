"""Gradient fault: the loss is rebuilt from .item(), so it has no graph (seed appendix G.3)."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4), torch.randn(16, 1)
for step in range(2):
    mse = nn.functional.mse_loss(model(x), y)
    loss = torch.tensor(mse.item() + 0.01)  # a "regularized" loss rebuilt from a Python number
    opt.zero_grad()
    loss.backward()
    opt.step()
