"""Layout fault: view() after transpose; the transposed tensor is not contiguous."""

import torch
import torch.nn as nn


class TokenMixer(nn.Module):
    def __init__(self, tokens=6, dim=4):
        super().__init__()
        self.mix = nn.Linear(tokens, tokens)
        self.out = nn.Linear(tokens * dim, 1)

    def forward(self, x):  # x: (batch, tokens, dim)
        h = self.mix(x.transpose(1, 2))  # (batch, dim, tokens), non-contiguous after transpose
        h = h.transpose(1, 2)
        return self.out(h.view(x.shape[0], -1))  # needs .reshape(...)


torch.manual_seed(0)
model = TokenMixer()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 6, 4), torch.randn(8, 1)
loss = nn.functional.mse_loss(model(x), y)
opt.zero_grad()
loss.backward()
opt.step()
