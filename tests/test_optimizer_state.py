"""Session 11: what an optimizer carries from one evaluation or step to the next.

* `gradient.closure_grads_accumulated` (`_dynamics/_closure.py`): LBFGS re-evaluates its closure
  up to `max_iter` times per step; a closure without `zero_grad()` hands it the running sum of
  every gradient so far (temperature scaling's `def eval(): loss.backward()`).
* `dynamics.optimizer_state_reset` (`_dynamics/_rebuilt.py`): a function that trains one epoch
  and builds its Adam inside throws the moment estimates away at every call.
* `checkpoint.mostly_init` (`_ledger_step/_origins.py`): an EMA copy with decay 0.9998 and no
  warm-up, saved after 200 updates, is 96 % the initialization.

The look-alikes stay quiet: a closure that zeroes (to None or in place), a closure that
backpropagates two losses in turn, one optimizer for the run, a stateless SGD re-created, a
re-created optimizer that loads the state of the one before, a new lr at each rebuild, a k-fold
loop that re-initializes the model, an EMA with warm-up, a reset to the initial weights, the
trained model's own state."""

from __future__ import annotations

import copy
import pathlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def codes(report: torchtriage.Report) -> list[str]:
    return [f.code for f in report.findings]


# ---------------------------------------------------------------- LBFGS closures
def _calibrate(zero: str | None, max_iter: int = 30, two_losses: bool = False) -> torchtriage.Report:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 5, generator=g) * 4
    labels = torch.randint(0, 5, (200,), generator=g)
    temperature = nn.Parameter(torch.ones(1) * 1.5)
    with torchtriage.watch(on_anomaly="record", report=False, discover=True) as s:
        optimizer = torch.optim.LBFGS([temperature], lr=0.01, max_iter=max_iter)

        def closure():
            if zero == "none":
                optimizer.zero_grad()
            elif zero == "in_place":
                optimizer.zero_grad(set_to_none=False)
            if two_losses:
                total = torch.zeros(())
                for half in (slice(0, 100), slice(100, 200)):
                    part = F.cross_entropy(logits[half] / temperature, labels[half]) / 2
                    part.backward()
                    total = total + part.detach()
                return total
            loss = F.cross_entropy(logits / temperature, labels)
            loss.backward()  # <- closure backward
            return loss

        optimizer.step(closure)
    return s.report


def test_lbfgs_closure_without_zero_grad_sums_the_gradients():
    [f] = _calibrate(None).filter(code="gradient.closure_grads_accumulated")
    assert f.severity is Severity.WARNING and f.line == line("closure backward")
    assert f.module == "LBFGS" and f.parameter == "temperature"
    n = f.evidence["closure_evaluations"]
    assert n > 2 and f.evidence["evaluations_added_onto_previous"] == n - 1
    assert f.message.startswith(f"LBFGS.step(closure) re-evaluated the closure {n} times and {n - 1} of those")


@pytest.mark.parametrize("zero", ["none", "in_place"])
def test_lbfgs_closure_that_zeroes_is_quiet(zero):
    assert "gradient.closure_grads_accumulated" not in codes(_calibrate(zero))


def test_a_closure_backpropagating_two_losses_in_turn_is_quiet():
    assert "gradient.closure_grads_accumulated" not in codes(_calibrate("in_place", two_losses=True))


# ---------------------------------------------------------------- optimizers re-created
class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _data(n: int = 64) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    w = torch.randn(8, 1, generator=g)
    out = []
    for _ in range(n):
        x = torch.randn(16, 8, generator=g)
        out.append((x, torch.sin(x @ w) + 0.3 * torch.randn(16, 1, generator=g)))
    return out


def train_epoch(model, batches, lr=1e-2, opt=None, kind="adam"):
    if opt is None:
        if kind == "adam":
            opt = torch.optim.Adam(model.parameters(), lr=lr)  # <- built per epoch
        else:
            opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    return opt


def _epochs(mode: str, epochs: int = 6) -> torchtriage.Report:
    torch.manual_seed(0)
    model = Net()
    batches = _data(8)
    with torchtriage.watch(model, on_anomaly="record", report=False, discover=True) as s:
        kept = None
        if mode == "once":
            kept = torch.optim.Adam(model.parameters(), lr=1e-2)
        for epoch in range(epochs):
            if mode in ("per_epoch", "once"):
                train_epoch(model, batches, opt=kept)
            elif mode == "sgd":
                train_epoch(model, batches, kind="sgd")
            elif mode == "lr_drop":
                train_epoch(model, batches, lr=1e-2 * 0.5 ** epoch)
            elif mode == "resumed":
                new = torch.optim.Adam(model.parameters(), lr=1e-2)
                if kept is not None:
                    new.load_state_dict(kept.state_dict())
                kept = train_epoch(model, batches, opt=new)
            elif mode == "kfold":
                for m in model.modules():
                    if isinstance(m, nn.Linear):
                        m.reset_parameters()
                train_epoch(model, batches)
            elif mode == "alternating":
                if kept is None:
                    kept = [torch.optim.Adam(model.parameters(), lr=1e-2) for _ in range(2)]
                train_epoch(model, batches, opt=kept[epoch % 2])
    return s.report


def test_adam_rebuilt_every_epoch_loses_its_state():
    [f] = _epochs("per_epoch").filter(code="dynamics.optimizer_state_reset")
    assert f.line == line("built per epoch") and f.module == "Adam"
    ev = f.evidence
    assert ev["rebuilds"] == 5 and ev["rebuilt_at_steps"] == [8, 16, 24, 32, 40]
    assert ev["steps_per_optimizer"] == 8 and ev["state_discarded"] == ["exp_avg", "exp_avg_sq", "step"]
    assert ev["update_pairs_measured"] == 4
    # the harm measured: Adam's first, bias-corrected step is ~lr per element, whatever the history
    assert f.severity is Severity.WARNING and float(ev["first_update_vs_last_update"]) >= 2
    assert f.message.startswith("a new Adam over the same 4 parameter(s) was built 5 time(s)")


@pytest.mark.parametrize("mode", ["once", "sgd", "lr_drop", "resumed", "kfold", "alternating"])
def test_optimizer_kept_or_rebuilt_for_a_reason_is_quiet(mode):
    assert "dynamics.optimizer_state_reset" not in codes(_epochs(mode))


# ---------------------------------------------------------------- averaged copies
class Ema(nn.Module):
    def __init__(self, model: nn.Module, decay: float, warmup: bool) -> None:
        super().__init__()
        self.module = copy.deepcopy(model)
        self.decay, self.warmup, self.updates = decay, warmup, 0

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.updates += 1
        d = min(self.decay, 1 - (1 + self.updates) ** -0.67) if self.warmup else self.decay
        for e, m in zip(self.module.state_dict().values(), model.state_dict().values()):
            e.lerp_(m, 1 - d)


def _averaged(mode: str) -> torchtriage.Report:
    torch.manual_seed(0)
    model = Net()
    init = copy.deepcopy(model.state_dict())
    ema = Ema(model, 0.9998, warmup=mode == "warmup")
    batches = _data(50)
    with torchtriage.watch(model, on_anomaly="record", report=False, discover=True) as s:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(4):
            for x, y in batches:
                opt.zero_grad()
                F.mse_loss(model(x), y).backward()
                opt.step()
                ema.update(model)
        saved = Net()
        if mode in ("stale", "warmup"):
            saved.load_state_dict(copy.deepcopy(ema.module.state_dict()))  # <- load ema
        elif mode == "reset":
            model.load_state_dict(init)
        elif mode == "own":
            saved.load_state_dict(model.state_dict())
    return s.report


def test_ema_without_warmup_saved_is_mostly_the_init():
    [f] = _averaged("stale").filter(code="checkpoint.mostly_init")
    assert f.severity is Severity.WARNING and f.line == line("load ema") and f.module == "Net"
    ev = f.evidence
    assert ev["tensors_compared"] == 3 and ev["optimizer_steps"] == 200
    assert 0 < ev["share_of_training"] < 0.1
    assert "of the way is still the initialization" in f.message


@pytest.mark.parametrize("mode", ["warmup", "reset", "own"])
def test_loads_that_follow_training_or_reset_it_are_quiet(mode):
    assert "checkpoint.mostly_init" not in codes(_averaged(mode))
