"""A learning rate far too large: finite gradients, but the update overflows the parameters."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e38)  # BUG: meant 1e-3
for step in range(3):
    x, y = torch.randn(32, 4), torch.randn(32, 1) * 10
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.4g}")
