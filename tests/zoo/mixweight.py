"""CutMix whose label weight is the sampled ratio while the pasted box was clipped (and correct
look-alikes). Each builder returns (model, optimizer, train); `bug=False` is the fixed twin."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def _data(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    protos = torch.randn(5, 3, 20, 20, generator=g)
    y = torch.randint(0, 5, (96,), generator=g)
    return protos[y] + 0.5 * torch.randn(96, 3, 20, 20, generator=g), y


def _net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 5))


def box(h: int, w: int, lam: float, rng: np.random.RandomState) -> tuple[int, int, int, int]:
    """A box of area (1 - lam) h w centred anywhere, clipped to the image."""
    ch, cw = int(h * np.sqrt(1 - lam)), int(w * np.sqrt(1 - lam))
    cy, cx = rng.randint(h), rng.randint(w)
    return (int(np.clip(cy - ch // 2, 0, h)), int(np.clip(cy + ch // 2, 0, h)),
            int(np.clip(cx - cw // 2, 0, w)), int(np.clip(cx + cw // 2, 0, w)))


def cutmix_indexed(bug: bool, steps: int = 3):
    """`x[:, :, box] = x[perm, :, box]`, loss `L(y) * lam + L(y[perm]) * (1 - lam)`."""
    g = torch.Generator().manual_seed(0)
    rng = np.random.RandomState(3)
    images, labels = _data(g)
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def train():
        for step in range(steps):
            idx = torch.randperm(96, generator=g)[:32]
            x, y = images[idx].clone(), labels[idx]
            lam = rng.beta(1.0, 1.0)
            perm = torch.randperm(32, generator=g)
            y1, y2, x1, x2 = box(20, 20, lam, rng)
            x[:, :, y1:y2, x1:x2] = x[perm, :, y1:y2, x1:x2]  # the paste
            if not bug:
                lam = 1 - (y2 - y1) * (x2 - x1) / (20 * 20)
            out = model(x)
            loss = F.cross_entropy(out, y) * lam + F.cross_entropy(out, y[perm]) * (1.0 - lam)  # the mixed loss
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


def cutmix_flipped_batch(bug: bool, steps: int = 3):
    """timm's form: the box taken from the batch flipped, `lam * L(y) + (1 - lam) * L(y.flip(0))`,
    through a criterion module; the box always touches a corner (clipped hard)."""
    g = torch.Generator().manual_seed(1)
    images, labels = _data(g)
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()

    def train():
        for step in range(steps):
            idx = torch.randperm(96, generator=g)[:24]
            x, y = images[idx].clone(), labels[idx]
            lam = 0.5
            side = int(20 * np.sqrt(1 - lam))
            x[:, :, : side // 2, : side // 2] = x.flip(0)[:, :, : side // 2, : side // 2]
            if not bug:
                lam = 1 - (side // 2) ** 2 / 400
            out = model(x)
            loss = lam * criterion(out, y) + (1 - lam) * criterion(out, y.flip(0))
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


def mixup(steps: int = 3):
    """A blend of the whole images: no box, nothing to compare."""
    g = torch.Generator().manual_seed(2)
    images, labels = _data(g)
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def train():
        for step in range(steps):
            idx = torch.randperm(96, generator=g)[:32]
            x, y = images[idx], labels[idx]
            lam = float(np.random.RandomState(step).beta(0.4, 0.4))
            perm = torch.randperm(32, generator=g)
            out = model(lam * x + (1 - lam) * x[perm])
            loss = lam * F.cross_entropy(out, y) + (1 - lam) * F.cross_entropy(out, y[perm])
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


def cutmix_after_warmup(steps: int = 8):
    """Plain batches first, CutMix from the fifth step on (the mixing branch first seen after the
    warm-up): a fixed corner box with the sampled weight."""
    g = torch.Generator().manual_seed(3)
    images, labels = _data(g)
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def train():
        for step in range(steps):
            idx = torch.randperm(96, generator=g)[:16]
            x, y = images[idx].clone(), labels[idx]
            if step < 4:
                loss = F.cross_entropy(model(x), y)
            else:
                lam = 0.3
                perm = torch.randperm(16, generator=g)
                x[:, :, 14:, 14:] = x[perm, :, 14:, 14:]
                out = model(x)
                loss = F.cross_entropy(out, y) * lam + F.cross_entropy(out, y[perm]) * (1 - lam)  # mixed late
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train
