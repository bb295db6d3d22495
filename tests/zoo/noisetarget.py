"""A corruption meant for the input written in place into the tensor that is also the loss
target (and correct look-alikes). Each builder returns (model, optimizer, train); `bug=False`
is the fixed twin."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def _signals(g: torch.Generator, n: int = 64, t: int = 128) -> torch.Tensor:
    f = torch.rand(n, 1, generator=g) * 6 + 1
    return torch.sin(torch.linspace(0, 6.28, t)[None] * f)


class Enhancer(nn.Module):
    def __init__(self, t: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * t, 64), nn.ReLU(), nn.Linear(64, t))

    def forward(self, x, cond):
        return self.net(torch.cat([x, cond], 1))


def condition_dropout(bug: bool, steps: int = 3):
    """Half of the clean rows replaced by noise as the model's first input, row by row."""
    g = torch.Generator().manual_seed(0)
    clean_all = _signals(g)
    model = Enhancer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train():
        for step in range(steps):
            clean = clean_all[torch.randperm(64, generator=g)[:16]].clone()
            noisy = clean + 0.5 * torch.randn(clean.shape, generator=g)
            target = clean if bug else clean.clone()
            drop = torch.rand(16, generator=g) < 0.5
            for i in range(16):
                if drop[i]:
                    clean[i] = torch.randn_like(clean[i])  # the overwrite
            loss = F.mse_loss(model(clean, noisy), target)
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


def masked_rows(bug: bool, steps: int = 3):
    """A boolean row mask, the symmetric loss given (target, prediction)."""
    g = torch.Generator().manual_seed(1)
    data = _signals(g)
    model = Enhancer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train():
        for step in range(steps):
            x = data[torch.randperm(64, generator=g)[:16]].clone()
            cond = x + 0.3 * torch.randn(x.shape, generator=g)
            src = x if bug else x.clone()
            rows = torch.arange(16) % 3 == 0
            src[rows] = torch.randn(int(rows.sum()), 128, generator=g)
            loss = F.l1_loss(x, model(src, cond))
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


def diffusion_noise_target(steps: int = 3):
    """The noise drawn for x_t is the target on purpose."""
    g = torch.Generator().manual_seed(2)
    data = _signals(g)
    model = Enhancer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train():
        for step in range(steps):
            x0 = data[torch.randperm(64, generator=g)[:16]]
            a = torch.rand(16, 1, generator=g)
            eps = torch.randn_like(x0)
            xt = a.sqrt() * x0 + (1 - a).sqrt() * eps
            loss = F.mse_loss(model(xt, a.expand(16, 128)), eps)
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train
