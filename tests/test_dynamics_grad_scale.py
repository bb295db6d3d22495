"""Session 11: a gradient scale that depends on the step's place in the pass
(`_dynamics/_sawtooth.py`, `dynamics.grad_scale_restarts`). The bug is rwkv-pytorch's
token-weighted accumulation: each window's loss is divided by the tokens seen since the epoch
began, a total reset only at the next epoch, so the k-th update gets ~1/k of its gradient. The
look-alikes stay quiet: the totals reset after each step, a k-fold loop with a new model and
optimizer per fold, a schedule with warm restarts."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

CODE = "dynamics.grad_scale_restarts"


def _run(mode: str, epochs: int = 3, batches: int = 48, accumulation: int = 2) -> torchtriage.Report:
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(8, 16, generator=g), torch.randn(8, 1, generator=g)) for _ in range(batches)]
    torch.manual_seed(0)
    with torchtriage.watch(on_anomaly="record", report=False, discover=True) as s:
        model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        sched = None
        if mode == "warm_restarts":
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=batches // accumulation)
        for _ in range(epochs):
            if mode == "kfold":
                model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
                opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            total = 0
            opt.zero_grad()
            for i, (x, y) in enumerate(data, start=1):
                total += x.shape[0]
                loss = F.mse_loss(model(x), y, reduction="sum") / total
                loss.backward()
                if i % accumulation == 0:
                    opt.step()
                    opt.zero_grad()
                    if sched is not None:
                        sched.step()
                    if mode != "never_reset":
                        total = 0
    return s.report


def test_accumulation_totals_never_reset_shrink_the_gradient_through_each_epoch():
    [f] = _run("never_reset").filter(code=CODE)
    assert f.severity is Severity.WARNING
    ev = f.evidence
    assert ev["restart_steps"] == [24, 48] and ev["period_steps"] == 24 and ev["segments"] == 3
    assert float(ev["shrink_within_segment_min"]) >= 5
    assert "within every stretch of 24 optimizer steps" in f.message


def test_totals_reset_after_each_step_are_quiet():
    assert not _run("reset").filter(code=CODE)


def test_a_new_model_per_fold_is_quiet():
    assert not _run("kfold").filter(code=CODE)


def test_warm_restarts_of_the_schedule_are_quiet():
    assert not _run("warm_restarts").filter(code=CODE)
