"""A buffer updated in place from the batch statistics with their graph (`silent.loss_graph_kept`,
variant buffer): the buffer's graph chains from step to step. Written the ways users write it, and
the updates that stay quiet."""

from __future__ import annotations

import torch
import torch.nn as nn

from torchtriage import Category, Severity
from torchtriage._session import Session


def _run(model, steps=12, discover=False):
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    kw = dict(on_anomaly="record", report=False, checks=["silent"])
    with (Session(discover=True, **kw) if discover else Session(model, opt, **kw)) as s:
        for _ in range(steps):
            x = torch.randn(16, 6)
            loss = (model(x) - x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report.filter(code="silent.loss_graph_kept")


class StandingNorm(nn.Module):
    """Batch norm that keeps its own running statistics for evaluation."""

    def __init__(self, n, momentum=0.1, fixed=False):
        super().__init__()
        self.momentum, self.fixed = momentum, fixed
        self.register_buffer("stored_mean", torch.zeros(n))
        self.register_buffer("stored_var", torch.ones(n))

    def forward(self, x):
        if self.training:
            mean, var = x.mean(0), x.var(0, unbiased=False)
            if self.fixed:
                with torch.no_grad():
                    self.stored_mean.mul_(1 - self.momentum).add_(mean * self.momentum)
                    self.stored_var.mul_(1 - self.momentum).add_(var * self.momentum)
            else:
                self.stored_mean[:] = self.stored_mean * (1 - self.momentum) + mean * self.momentum
                self.stored_var[:] = self.stored_var * (1 - self.momentum) + var * self.momentum
        else:
            mean, var = self.stored_mean, self.stored_var
        return (x - mean) / (var + 1e-5).sqrt()


def _net(**kw):
    return nn.Sequential(nn.Linear(6, 8), StandingNorm(8, **kw), nn.ReLU(), nn.Linear(8, 6))


def test_running_stats_buffer_updated_with_the_graph():
    torch.manual_seed(0)
    found = _run(_net())
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.WARNING and f.category is Category.MEMORY
    assert "stored_mean" in f.message and "StandingNorm" in f.message
    assert f.evidence["buffer_owner"] == "StandingNorm" and f.evidence["calls_chained"] >= 8


class EmaCenter(nn.Module):
    """A variant: an EMA of the output center kept for evaluation (used only in eval mode),
    written with `copy_` from the batch center."""

    def __init__(self, fixed=False):
        super().__init__()
        self.body = nn.Linear(6, 6)
        self.fixed = fixed
        self.register_buffer("center", torch.zeros(6))

    def forward(self, x):
        out = self.body(x)
        if not self.training:
            return out - self.center
        batch_center = out.mean(0)
        self.center.copy_(0.9 * self.center + 0.1 * (batch_center.detach() if self.fixed else batch_center))
        return out - batch_center


def test_ema_center_copied_in_with_the_graph_discovered():
    torch.manual_seed(0)
    found = _run(EmaCenter(), discover=True)
    assert len(found) == 1 and found[0].evidence["buffer"].endswith("center")


def test_buffers_updated_without_the_graph_are_quiet():
    torch.manual_seed(0)
    assert not _run(_net(fixed=True))
    torch.manual_seed(0)
    assert not _run(EmaCenter(fixed=True), discover=True)
    torch.manual_seed(0)
    assert not _run(nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.Linear(8, 6)))
