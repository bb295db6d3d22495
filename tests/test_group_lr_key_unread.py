"""Session 19: a per-group learning-rate key of the user's own that nothing reads
(`_dynamics/_groups.py`, `dynamics.group_lrs_collapsed` variant `unread`).

torch.optim keeps any extra key in a param group but steps with `lr` only: a backbone given
`"lr_mul": 0.1` trains at the full rate unless the user's code writes the product into `lr`.
Programs written the way users write them (one group per parameter by name, two groups by
module, a `learning_rate` key), and the look-alikes that read the key (a LambdaLR-free loop that
applies it, a custom scheduler that scales by it, an extra non-lr key)."""

from __future__ import annotations

import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Category, Severity

HERE = pathlib.Path(__file__).read_text().splitlines()
CODE = "dynamics.group_lrs_collapsed"


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16))
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.backbone(x)))


def batches(n: int = 30):
    g = torch.Generator().manual_seed(1)
    for _ in range(n):
        x = torch.randn(16, 8, generator=g)
        yield x, x.sum(1, keepdim=True)


def fit(model: nn.Module, opt: torch.optim.Optimizer, apply_mul: bool = False, sched=None) -> None:
    for x, y in batches():
        if apply_mul:  # the loop reads the key: the groups do run at different rates
            for g in opt.param_groups:
                g["lr"] = 1e-2 * g["lr_mul"]
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()


def per_param_groups(model: nn.Module) -> torch.optim.Optimizer:
    params = []
    for name, p in model.named_parameters():
        mul = 0.1 if name.startswith("backbone") else 1.0
        params.append({"params": [p], "lr_mul": mul})  # <- per-param
    return torch.optim.SGD(params, lr=1e-2, momentum=0.9)


def run(train, model: nn.Module) -> list:
    with torchtriage.watch([model], on_anomaly="record", report=False, discover=True) as s:
        train()
    return s.report.filter(code=CODE)


def test_lr_mul_per_parameter_is_ignored():
    m = Net()
    [f] = run(lambda: fit(m, per_param_groups(m)), m)
    assert (f.severity, f.category, f.line) == (Severity.WARNING, Category.GRADIENT, line("per-param"))
    assert "'lr_mul'" in f.message and "0.1 / 1" in f.message
    assert f.evidence["unread_group_key"] == "lr_mul"
    assert (f.evidence["steps_with_identical_lrs"], f.evidence["optimizer_steps"]) == (30, 30)


def test_learning_rate_key_two_groups_with_scheduler_is_ignored():
    m = Net()

    def train() -> None:
        opt = torch.optim.Adam([  # <- two-groups
            {"params": m.backbone.parameters(), "learning_rate": 1e-4},
            {"params": m.head.parameters(), "learning_rate": 1e-3}], lr=1e-3)
        fit(m, opt, sched=torch.optim.lr_scheduler.StepLR(opt, 10, 0.5))
    [f] = run(train, m)
    assert (f.severity, f.line) == (Severity.WARNING, line("two-groups"))
    assert f.evidence["unread_group_key"] == "learning_rate"


def test_loop_that_applies_the_multiplier_is_quiet():
    m = Net()
    assert run(lambda: fit(m, per_param_groups(m), apply_mul=True), m) == []


class ScaledWarmup(torch.optim.lr_scheduler.LRScheduler):
    """A scheduler that reads each group's multiplier (how detectron-style code uses such keys)."""

    def get_lr(self) -> list[float]:
        warm = min(1.0, (self.last_epoch + 1) / 5)
        return [base * warm * g["lr_scale"] for base, g in zip(self.base_lrs, self.optimizer.param_groups)]


def test_scheduler_that_reads_the_key_is_quiet():
    m = Net()

    def train() -> None:
        opt = torch.optim.AdamW([{"params": m.backbone.parameters(), "lr_scale": 0.1},
                                 {"params": m.head.parameters(), "lr_scale": 1.0}], lr=1e-3)
        fit(m, opt, sched=ScaledWarmup(opt))
    assert run(train, m) == []


def test_other_custom_keys_and_equal_multipliers_are_quiet():
    m = Net()

    def train() -> None:
        opt = torch.optim.SGD([{"params": m.backbone.parameters(), "name": "backbone", "tag": 1, "lr_mul": 1.0},
                               {"params": m.head.parameters(), "name": "head", "tag": 2, "lr_mul": 1.0}], lr=1e-2)
        fit(m, opt)
    assert run(train, m) == []
