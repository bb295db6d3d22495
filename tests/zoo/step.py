"""Training steps written the way users write them, beyond "one model call + one F loss"
(issue 11): raw tensors as parameters, hand-written losses, several model calls per step,
functional code. Each `BUG` comment marks the line a finding must name."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def gmm_item_rebuild(steps: int = 3) -> tuple[torch.optim.Optimizer, torch.Tensor]:
    """A 1-D two-component mixture fitted by hand: the means are rebuilt from `.item()`."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 1, generator=g)
    means_coef = torch.rand(2, generator=g, requires_grad=True)
    log_scales = torch.zeros(2, requires_grad=True)
    opt = torch.optim.Adam([means_coef, log_scales], lr=0.05)
    loss = torch.zeros(())
    for _ in range(steps):
        opt.zero_grad()
        means = torch.tensor([means_coef[0].item(), means_coef[1].item()])  # BUG: values leave the graph
        d = (x - means) / log_scales.exp()
        loss = (d ** 2).mean() + log_scales.sum()
        loss.backward()
        opt.step()
    return opt, loss.detach()


def gmm_correct(steps: int = 3) -> torch.optim.Optimizer:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 1, generator=g)
    means_coef = torch.rand(2, generator=g, requires_grad=True)
    log_scales = torch.zeros(2, requires_grad=True)
    opt = torch.optim.Adam([means_coef, log_scales], lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        d = (x - means_coef) / log_scales.exp()
        loss = (d ** 2).mean() + log_scales.sum()
        loss.backward()
        opt.step()
    return opt


def style_transfer(steps: int = 3) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor]:
    """Optimize an image through a frozen feature net: `Adam([image])` (correct)."""
    torch.manual_seed(0)
    features = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3))
    for p in features.parameters():
        p.requires_grad_(False)
    target = torch.rand(1, 3, 16, 16)
    image = torch.rand(1, 3, 16, 16, requires_grad=True)
    opt = torch.optim.Adam([image], lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(features(image), features(target)) + 1e-3 * image.pow(2).mean()
        loss.backward()
        opt.step()
    return features, opt, image
