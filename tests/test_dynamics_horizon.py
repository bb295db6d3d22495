"""Session 10: a schedule sized in micro-batches but stepped per optimizer update
(`_dynamics/_horizon.py`, `dynamics.schedule_horizon_accumulated`). The bug is written the way
training scripts write it (`num_training_steps=max_train_steps * gradient_accumulation_steps`
with the scheduler stepped after `optimizer.step()`); the look-alikes stay quiet: the horizon in
updates, a scheduler stepped per micro-batch over the micro-batches, a short run without
accumulation whose schedule is longer than the run."""

from __future__ import annotations

import math
import pathlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()
lrs = torch.optim.lr_scheduler
CODE = "dynamics.schedule_horizon_accumulated"


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def cosine_with_warmup(warmup: int, total: int):
    def factor(step: int) -> float:  # (as transformers' get_cosine_schedule_with_warmup)
        if step < warmup:
            return step / max(1, warmup)
        progress = (step - warmup) / max(1, total - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    return factor


def run(accum: int, updates: int, make_sched, per_micro_batch: bool = False) -> torchtriage.Report:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        sched = make_sched(opt)
        for _ in range(updates):
            for _ in range(accum):
                x = torch.randn(16, 8, generator=g)
                loss = F.mse_loss(model(x), x.sum(1, keepdim=True)) / accum
                loss.backward()
                if per_micro_batch:
                    sched.step()
            opt.step()
            if not per_micro_batch:
                sched.step()
            opt.zero_grad()
    return s.report


def horizon(report: torchtriage.Report) -> list[tuple[str, str]]:
    return [(f.code, f.message) for f in report.findings if f.code == CODE]


def test_lambda_schedule_sized_in_micro_batches_stepped_per_update():
    accum, max_train_steps = 4, 24

    def make(opt):
        return lrs.LambdaLR(opt, cosine_with_warmup(2 * accum, max_train_steps * accum))  # <- lambda

    [f] = run(accum, max_train_steps, make).filter(code=CODE)
    assert f.severity is Severity.WARNING and f.line == line("lambda")
    assert f.message == ("LambdaLR is stepped once per optimizer update (24 steps) but its schedule is sized for "
                         "96 steps, 4x the updates: with gradient accumulation (4 backward calls per update) the "
                         "run used 25% of the schedule and ended at lr 0.0009206, 92% of its peak 0.001, where the "
                         "schedule declares ~0")
    ev = f.evidence
    assert (ev["declared_horizon"], ev["scheduler_steps"], ev["optimizer_steps"]) == (96, 24, 24)
    assert ev["backward_calls_per_optimizer_step"] == 4.0 and ev["lr_end"] == "0.0009206"


def test_cosine_t_max_in_micro_batches_stepped_per_update():
    def make(opt):
        return lrs.CosineAnnealingLR(opt, T_max=20 * 3)  # <- cosine

    [f] = run(3, 20, make).filter(code=CODE)
    assert f.line == line("cosine") and f.evidence["declared_horizon"] == 60
    assert "sized for 60 steps, 3x the updates" in f.message


def test_horizon_in_updates_is_quiet():
    assert horizon(run(4, 24, lambda opt: lrs.LambdaLR(opt, cosine_with_warmup(2, 24)))) == []
    assert horizon(run(3, 20, lambda opt: lrs.CosineAnnealingLR(opt, T_max=20))) == []


@pytest.mark.filterwarnings("ignore:Detected call of")
def test_scheduler_stepped_per_micro_batch_over_the_micro_batches_is_quiet():
    report = run(4, 24, lambda opt: lrs.LambdaLR(opt, cosine_with_warmup(8, 96)), per_micro_batch=True)
    assert horizon(report) == []


def test_a_run_shorter_than_its_schedule_without_accumulation_is_quiet():
    # (a debugging run cut to a quarter of the schedule: no micro-batches to have counted)
    assert horizon(run(1, 24, lambda opt: lrs.LambdaLR(opt, cosine_with_warmup(2, 96)))) == []


def test_a_schedule_that_never_reaches_zero_is_quiet():
    # an inverse-square-root decay has no end: its horizon is no count of anything
    assert horizon(run(4, 24, lambda opt: lrs.LambdaLR(opt, lambda s: 1 / math.sqrt(s + 1)))) == []
