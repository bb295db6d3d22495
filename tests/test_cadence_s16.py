"""Session 16: the loop's cadence against the schedule's horizon (`_dynamics/_burst.py`,
`_pastend.py`, `_warmuplen.py`). Each bug is written the way training scripts write it, with a
variant the corpus does not hold; the look-alikes stay quiet: a scheduler stepped once per global
step, a warm restart made on purpose, a per-epoch step after the batch loop, a schedule counted in
micro-batches stepped per micro-batch, a short warm-up, a warm-up longer than a run cut short."""

from __future__ import annotations

import math
import pathlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()
lrs = torch.optim.lr_scheduler
PAST_END = "dynamics.schedule_past_end"
BURST = "dynamics.scheduler_burst_steps"
LONG = "dynamics.warmup_most_of_run"
NEW = (PAST_END, BURST, LONG)
# a scheduler stepped before the first optimizer step (a resume, a per-micro-batch schedule): torch warns
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def alarms(report: torchtriage.Report) -> list[str]:
    return [f.code for f in report.findings if f.code in NEW]


def warmup_cosine(warmup: int, total: int, floor: float = 0.0):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return floor + (1 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return factor


# ---------------------------------------------------------------- a schedule stepped past its end


def global_steps(steps: int, updates_per_step: int, per_update: bool, make) -> torchtriage.Report:
    """An RL-style trainer: each global step makes `updates_per_step` optimizer updates over its
    mini-batches; the schedule is built for `steps` global steps."""
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 3))
    opt = torch.optim.AdamW(policy.parameters(), lr=2e-3)
    sched = make(opt, steps)
    g = torch.Generator().manual_seed(3)
    with torchtriage.watch(policy, opt, on_anomaly="record", report=False) as s:
        for _ in range(steps):
            obs = torch.randn(8 * updates_per_step, 6, generator=g)
            act = torch.randint(0, 3, (8 * updates_per_step,), generator=g)
            adv = torch.randn(8 * updates_per_step, generator=g)
            for mb in range(updates_per_step):
                sl = slice(8 * mb, 8 * (mb + 1))
                logp = F.log_softmax(policy(obs[sl]), -1).gather(1, act[sl, None]).squeeze(1)
                loss = -(logp * adv[sl]).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                if per_update:
                    sched.step()  # <- per update
            if not per_update:
                sched.step()
    return s.report


def test_warmup_cosine_built_for_global_steps_stepped_per_update():
    def make(opt, steps):
        return lrs.LambdaLR(opt, warmup_cosine(3, steps, floor=0.05))

    report = global_steps(30, 2, True, make)
    [f] = report.filter(code=PAST_END)
    assert f.severity is Severity.WARNING and f.line == line("per update")
    assert f.module == "LambdaLR" and f.category.value == "other"
    ev = f.evidence
    assert ev["scheduler_steps"] == 60 and ev["step_of_its_floor"] == 30
    assert float(ev["lr_climbed_back_to"]) > 0.9 * float(ev["lr_peak"])


def test_total_computed_too_small_without_a_floor():
    # a variant: the schedule's total is the number of epochs, the loop runs 3 updates each
    def make(opt, steps):
        return lrs.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))

    report = global_steps(20, 3, True, make)
    codes = [f.code for f in report.findings if f.severity is Severity.WARNING]
    assert PAST_END in codes or "dynamics.epoch_scheduler_per_batch" in codes


def test_schedule_stepped_once_per_global_step_is_quiet():
    def make(opt, steps):
        return lrs.LambdaLR(opt, warmup_cosine(3, steps, floor=0.05))

    assert alarms(global_steps(30, 2, False, make)) == []


def test_hard_restarts_are_quiet():
    def make(opt, steps):  # cosine with hard restarts every 10 updates: the lr jumps back in one step
        return lrs.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * (s % 10) / 10)))

    assert alarms(global_steps(20, 2, True, make)) == []


# ---------------------------------------------------------------- a scheduler stepped in bursts


def loader_run(burst: bool, per_micro: bool = False, epochs: int = 6, accum: int = 4) -> torchtriage.Report:
    torch.manual_seed(0)
    x = torch.randn(512, 10)
    y = (x[:, :3].sum(1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if per_micro:
        sched = lrs.OneCycleLR(opt, max_lr=0.05, total_steps=epochs * len(loader))
    else:
        sched = lrs.ExponentialLR(opt, gamma=0.7)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(epochs):
            for i, (xb, yb) in enumerate(loader):
                loss = F.cross_entropy(model(xb), yb) / accum
                loss.backward()
                if (i + 1) % accum == 0:
                    opt.step()
                    opt.zero_grad()
                if per_micro:
                    sched.step()
                elif burst and i >= len(loader) - accum:  # "during the epoch's last update"
                    sched.step()  # <- burst
            if not burst and not per_micro:
                sched.step()
    return s.report


def test_per_epoch_schedule_stepped_on_the_last_update_s_micro_batches():
    report = loader_run(burst=True)
    [f] = report.filter(code=BURST)
    assert f.severity is Severity.WARNING and f.line == line("burst")
    assert f.module == "ExponentialLR" and f.category.value == "other"
    ev = f.evidence
    assert ev["scheduler_steps"] == 24 and ev["epochs"] == 6 and ev["most_calls_between_two_optimizer_steps"] == 3
    assert "per epoch" in f.message


def test_per_epoch_step_after_the_loop_is_quiet():
    assert alarms(loader_run(burst=False)) == []


def test_schedule_counted_in_micro_batches_is_quiet():
    assert alarms(loader_run(burst=False, per_micro=True)) == []


def test_resume_fast_forward_is_quiet():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = lrs.StepLR(opt, step_size=5, gamma=0.5)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):  # the epochs done before the checkpoint
            sched.step()
        for _ in range(40):
            x = torch.randn(8, 4)
            F.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
            opt.step()
            opt.zero_grad()
            sched.step()
    assert alarms(s.report) == []


# ---------------------------------------------------------------- a warm-up that takes most of the run


def warmup_run(warmup_fraction: float, steps: int = 60, stop: int | None = None) -> torchtriage.Report:
    torch.manual_seed(0)
    w_true = torch.randn(16, 1) * 3
    model = nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    warm = max(1, int(warmup_fraction * steps))

    def factor(step: int) -> float:  # linear warm-up, then linear decay to 0 at `steps`
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (steps - step) / max(1, steps - warm))

    sched = lrs.LambdaLR(opt, factor)
    g = torch.Generator().manual_seed(5)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(stop or steps):
            x = torch.randn(32, 16, generator=g)
            loss = F.mse_loss(model(x), x @ w_true)
            loss.backward()
            opt.step()
            opt.zero_grad()
            sched.step()
    return s.report


def test_warmup_of_ninety_percent():
    [f] = warmup_run(0.9).filter(code=LONG)
    assert f.severity is Severity.WARNING and f.category.value == "other"
    ev = f.evidence
    assert ev["optimizer_steps"] == 60 and int(ev["warmup_steps"]) >= 45
    assert float(ev["loss_fall_second_half_of_warmup"][:-1]) > float(ev["loss_fall_first_half_of_warmup"][:-1])


def test_short_warmup_is_quiet():
    assert alarms(warmup_run(0.1)) == []


def test_warmup_longer_than_a_run_cut_short_is_quiet():
    assert alarms(warmup_run(0.5, steps=200, stop=60)) == []


# ---------------------------------------------------------------- a loss divided by an accumulation of 1


def divided_by(setting: int, accum: int, optimizer: str, then: int | None = None) -> torchtriage.Report:
    """A trainer divides the loss by its configured accumulation count while the loop accumulates
    `accum` micro-batches (a framework told 1, the loop doing its own accumulation)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = (torch.optim.SGD(model.parameters(), lr=1e-2) if optimizer == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=1e-3))
    g = torch.Generator().manual_seed(2)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(12):
            for _ in range(accum):
                x = torch.randn(16, 8, generator=g)
                loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
                scaled = loss / setting if then is None else loss / setting / then
                scaled.backward()  # <- divided
            opt.step()
            opt.zero_grad()
    return s.report


def test_loss_divided_by_an_accumulation_setting_of_one():
    [f] = divided_by(1, 4, "adam").filter(code="dynamics.accumulation_not_divided")
    assert f.severity is Severity.INFO and f.line == line("divided")  # Adam: scale-invariant, an info
    assert f.evidence["loss_scaled_by"] == 1.0 and f.evidence["backward_calls_per_step"] == 4


def test_loss_divided_by_the_accumulation_is_quiet():
    assert divided_by(4, 4, "sgd").filter(code="dynamics.accumulation_not_divided") == []


def test_loss_divided_then_divided_by_one_is_quiet():
    # the user's own division, then a framework's `loss / its_accumulation` told 1: a chain of scalings
    assert divided_by(4, 4, "sgd", then=1).filter(code="dynamics.accumulation_not_divided") == []
