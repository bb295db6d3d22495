"""Tiny models for repro bundles, replay and shrink, each named after its bug, plus a
test-only check that flags a non-finite model output (the real non-finite sentinel lives
in another check; these tests must not depend on it)."""

from __future__ import annotations

import torch
import torch.nn as nn

from torchtriage import Category, Finding, Severity, Stage
from torchtriage._checker import Checker


class NonFiniteOutputFlag(Checker):
    """Test-only: an error finding when the root model's output holds NaN/Inf."""

    name = "test_nonfinite_output"

    def on_root_forward(self, model, label, args, kwargs, output):
        if isinstance(output, torch.Tensor) and not bool(torch.isfinite(output).all()):
            self.session.add(Finding(Category.NUMERICAL, "test.nonfinite_output", "model output is not finite",
                                     severity=Severity.ERROR, stage=Stage.FORWARD, module="", op="forward"))


class ZeroNormDivides(nn.Module):
    """Normalises each sample by its norm: an all-zero sample gives 0/0 = NaN."""

    def __init__(self, features: int = 8):
        super().__init__()
        self.fc = nn.Linear(features, 1)

    def forward(self, x):
        return self.fc(x / x.norm(dim=1, keepdim=True))


class ClampedNorm(ZeroNormDivides):
    """The fix: the norm is clamped away from zero (same parameters as ZeroNormDivides)."""

    def forward(self, x):
        return self.fc(x / x.norm(dim=1, keepdim=True).clamp_min(1e-6))


class PoisonedTokenRow(nn.Module):
    """A sequence model whose embedding row for token 7 holds NaN: any sequence containing
    token 7 within its prefix gives a NaN output."""

    def __init__(self, vocab: int = 10, dim: int = 4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, 1)
        with torch.no_grad():
            self.emb.weight[7] = float("nan")

    def forward(self, tokens):
        return self.head(self.emb(tokens).mean(dim=1))


class RaisesOnNegativeSample(nn.Module):
    """Raises when a sample's features are all negative (an exception is always a trigger)."""

    def __init__(self, features: int = 8):
        super().__init__()
        self.fc = nn.Linear(features, 1)

    def forward(self, x):
        if bool((x < 0).all(dim=1).any()):
            raise ValueError("negative sample reached the model")
        return self.fc(x)


def zero_sample_batch(n: int = 64, poisoned: int = 37, features: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, features, generator=g) + 0.1
    x[poisoned] = 0.0
    y = torch.randn(n, 1, generator=g)
    return x, y
