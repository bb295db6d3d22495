"""The sentinel checks an update in full only every SAMPLE_EVERY steps and at the end: in
between, a parameter an update made non-finite is found through the next step's flags, and
the finding still names that update and its step."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity, Stage
from torchtriage._nonfinite._sentinel import SAMPLE_EVERY


def _watch(model, opt):
    return torchtriage.watch(model, opt, checks=["nonfinite"], on_anomaly="record", report=False)


def _errors(s):
    return [f for f in s.report.findings if f.severity is not Severity.INFO]


def _train(model, opt, steps, x, y, before_step=None):
    for i in range(steps):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if before_step is not None:
            before_step(i)
        opt.step()


def test_an_unsampled_update_that_blows_up_is_named_with_its_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 4), torch.randn(8, 1) * 10

    def warm_restart(i):  # the user's schedule sets a huge lr at step 3
        if i == 3:
            opt.param_groups[0]["lr"] = 1e38

    assert 3 % SAMPLE_EVERY
    with _watch(model, opt) as s:
        _train(model, opt, 6, x, y, warm_restart)
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step) == ("numerical.nonfinite_update", Stage.OPTIMIZER, 3)
    assert f.evidence["lr"] == 1e38
    assert f.message.startswith(f"The optimizer update made parameter {f.parameter} non-finite (SGD, step 3)")


def test_a_parameter_written_after_the_update_is_not_blamed_on_it():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    with _watch(model, opt) as s:
        _train(model, opt, 3, x, y)
        with torch.no_grad():
            model.weight.fill_(float("nan"))  # e.g. a broken checkpoint loaded between steps
        _train(model, opt, 1, x, y)
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step, f.parameter) == ("numerical.nonfinite_parameter", Stage.PARAMETER, 3, "weight")


class OverflowingState(torch.optim.Optimizer):
    """SGD whose extra state overflows from step `at` on; the parameters stay finite."""

    def __init__(self, params, at):
        super().__init__(params, {"lr": 1e-3})
        self.at, self.n = at, 0

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                acc = self.state[p].setdefault("acc", torch.zeros_like(p))
                if self.n >= self.at:
                    acc.add_(3e38).add_(3e38)
                p.add_(p.grad, alpha=-group["lr"])
        self.n += 1


def test_state_overflow_between_samples_is_found_by_the_check_at_the_end():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = OverflowingState(model.parameters(), at=2)
    with _watch(model, opt) as s:
        _train(model, opt, 4, torch.randn(8, 4), torch.randn(8, 1))
    assert all(torch.isfinite(p).all() for p in model.parameters())
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step) == ("numerical.nonfinite_optimizer_state", Stage.OPTIMIZER, 3)


def test_param_list_cache_follows_add_param_group():
    torch.manual_seed(0)
    a, b = nn.Linear(4, 4), nn.Linear(4, 1)
    opt = torch.optim.SGD(a.parameters(), lr=0.01)
    model = nn.Sequential(a, b)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    with _watch(model, opt) as s:
        _train(model, opt, 2, x, y)
        opt.add_param_group({"params": b.parameters(), "lr": 0.01})
        _train(model, opt, 2, x, y)
        sentinel = s.checker("nonfinite")
        assert [id(p) for p in sentinel.params_of(opt)] == [id(p) for p in model.parameters()]
    assert _errors(s) == []
    # the grad_norm series covers the new group's gradients too
    expected = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()
    assert abs(s.series["grad_norm"][-1] - expected) < 1e-5 * expected
