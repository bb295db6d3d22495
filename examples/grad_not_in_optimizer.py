"""A training script whose head never learns: the optimizer was built from the encoder only.

`torchtriage run examples/grad_not_in_optimizer.py` reports that head.weight and head.bias
receive gradients but are in no optimizer param group.
"""

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.encoder(x))


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.encoder.parameters(), lr=0.05)  # BUG: model.parameters() intended
for step in range(5):
    x = torch.randn(32, 8)
    y = x.sum(dim=1, keepdim=True)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.4f}")
