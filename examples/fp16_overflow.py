"""float16 activations overflow: a squared energy term passes 65504."""

import torch
import torch.nn as nn


class Energy(nn.Module):
    def forward(self, h):
        return (h * 300) ** 2  # fine in float32, past float16's range


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), Energy(), nn.Linear(8, 1)).half()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(3):
    x = torch.randn(16, 8, dtype=torch.float16)
    loss = model(x).float().pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.4g}")
