"""GradScaler call-order errors (`numerical.grad_scaler_order`): a GradScaler keeps one state per
optimizer that only `update()` resets; loops that skip `update()` on some iteration die on the
next `unscale_()` / `step()`. Written three ways; the correct loops that skip a step stay quiet."""

from __future__ import annotations

import pathlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Category

HERE = pathlib.Path(__file__).read_text().splitlines()


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def setup(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, torch.amp.GradScaler, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1))
    x, y = torch.randn(40, 6), torch.randn(40, 1)
    y[4:8] *= 50.0
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), torch.amp.GradScaler("cpu"), x, y


def run(fn) -> torchtriage.Finding:
    with pytest.raises(RuntimeError):
        with torchtriage.watch(on_anomaly="record", report=False) as s:
            fn()
    [f] = [f for f in s.report if f.severity.value == "error"]
    return f


def test_skipped_step_branch_that_also_skips_update():
    model, opt, scaler, x, y = setup()

    def loop() -> None:
        for i in range(10):
            loss = F.mse_loss(model(x[i * 4:(i + 1) * 4]), y[i * 4:(i + 1) * 4])
            scaler.scale(loss).backward()
            scaler.unscale_(opt)  # <- unscale A
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if norm.item() < 5.0:
                scaler.step(opt)
                scaler.update()
            opt.zero_grad()

    f = run(loop)
    assert (f.category, f.code, f.op, f.line) == (Category.NUMERICAL, "numerical.grad_scaler_order", "unscale_",
                                                  line("unscale A"))
    assert f.message.startswith("GradScaler.unscale_() refused: scaler.unscale_(optimizer) already ran on this "
                                "optimizer since the last scaler.update()")
    assert "scaler.update()" in f.next_check


def test_accumulation_steps_twice_then_updates_once_in_a_trainer_class():
    class Trainer:
        def __init__(self) -> None:
            self.model, self.opt, self.scaler, self.x, self.y = setup(1)

        def step(self, i: int) -> None:
            loss = F.l1_loss(self.model(self.x[i:i + 4]), self.y[i:i + 4])
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)  # <- step B
            if i % 2 == 1:
                self.scaler.update()

    t = Trainer()
    f = run(lambda: [t.step(i) for i in range(6)])
    assert (f.code, f.op, f.line) == ("numerical.grad_scaler_order", "step", line("step B"))
    assert "scaler.step(optimizer) already ran" in f.message


def test_unscale_after_step_without_update_in_a_function():
    def train_one(model, opt, scaler, xb, yb, first: bool) -> None:
        scaler.scale(F.mse_loss(model(xb), yb)).backward()
        if not first:
            scaler.unscale_(opt)  # <- unscale C
        scaler.step(opt)

    model, opt, scaler, x, y = setup(2)
    f = run(lambda: [train_one(model, opt, scaler, x[:8], y[:8], k == 0) for k in range(3)])
    assert (f.code, f.op, f.line) == ("numerical.grad_scaler_order", "unscale_", line("unscale C"))
    assert "scaler.step(optimizer) already ran" in f.message


def test_zh_message():
    from torchtriage import _catalogue

    old = _catalogue.get_language()
    _catalogue.set_language("zh")
    try:
        f = torchtriage.triage_exception(RuntimeError(
            "unscale_() has already been called on this optimizer since the last update().")).primary
    finally:
        _catalogue.set_language(old)
    assert f.code == "numerical.grad_scaler_order"
    assert "scaler.update()" in f.message and "优化器" in f.message


def test_correct_loops_that_skip_a_step_do_not_raise():
    model, opt, scaler, x, y = setup(3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(10):
            scaler.scale(F.mse_loss(model(x[i * 4:(i + 1) * 4]), y[i * 4:(i + 1) * 4])).backward()
            scaler.unscale_(opt)
            if torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0) < 5.0:
                scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    assert s.report.filter(code="numerical.grad_scaler_order") == []
