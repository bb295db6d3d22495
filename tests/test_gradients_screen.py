"""The gradient check's screening step: its first step runs without per-module events; a
correct loop ends the analysis there, and a loop with a gradient bug gets the module events on
the next step and the same findings, field for field, as an analysis that never screens."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from tests.zoo import gradients as zoo
from torch.nn.modules import module as torch_module

import torchtriage

# (PyTorch's own warnings on item() / tolist() of a tensor requiring grad: the zoo's bugs)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _data(n=16):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)

    def forward(self, x):
        return torch.relu(self.fc(x)).detach()  # CUT: in a block


class CutInsideABlock(nn.Module):
    """The cut sits in a submodule's forward: its path comes from the Python stack while
    screening (no module hook), from the module events after it."""

    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.block(x))


def _global_hooks() -> int:
    return len(torch_module._global_forward_pre_hooks)


def _loop(model, opt, steps, probe=None):
    x, y = _data()
    for i in range(steps):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if probe is not None:
            probe(i)


def test_a_correct_loop_is_analysed_in_one_step_without_module_hooks():
    model = zoo.mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    hooks = []
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        hooks.append(_global_hooks())
        _loop(model, opt, 3, probe=lambda i: hooks.append(_global_hooks()))
        check = s.checker("gradients")
        assert check.analysis is None and check.tracer is None  # concluded after step 0
    assert hooks == [0, 0, 0, 0]  # never on: every module call of the model ran at full speed
    assert list(s.report) == []


def test_a_cut_seen_by_the_screen_gets_module_events_on_the_next_step():
    model = CutInsideABlock()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hooks = []
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        _loop(model, opt, 3, probe=lambda i: hooks.append(_global_hooks()))
    # on during step 1 (the evidence step), off again once the window concluded
    assert hooks == [1, 0, 0]
    (f,) = s.report.filter(code="gradient.cut_detach")
    src, start = inspect.getsourcelines(Block.forward)
    line = start + next(i for i, t in enumerate(src) if "CUT: in a block" in t)
    assert (f.module, f.op, f.step, f.line, f.parameter) == ("block", "Tensor.detach", 0, line, "block.fc.weight")
    assert f.evidence["parameters"] == ["block.fc.weight", "block.fc.bias"]


def test_a_session_without_an_optimizer_has_module_events_from_its_first_step():
    model = zoo.DetachedEncoder()
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        assert _global_hooks() == 1
        x, y = _data()
        for _ in range(3):
            model.zero_grad()
            F.mse_loss(model(x), y).backward()
    (f,) = s.report.filter(code="gradient.cut_detach")
    assert (f.module, f.parameter) == ("", "enc.weight")


def _fields(report):
    return [(f.code, f.severity, f.stage, f.step, f.module, f.parameter, f.op, f.file, f.line, f.message,
             sorted(f.evidence.items(), key=str)) for f in report]


def _run(make, screen, steps=3, raises=False):
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False, gradients_screen=screen) as s:
        try:
            _loop(model, opt, steps)
        except RuntimeError:
            if not raises:
                raise
    return _fields(s.report)


class LossDetachedInABlock(nn.Module):
    """The whole output is detached inside a submodule: the loss has no grad_fn at step 0 and
    the cut's module is named from the Python stack (the screening step has no module hook)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), Detach())

    def forward(self, x):
        return self.body(x).sum(1, keepdim=True)


class Detach(nn.Module):
    def forward(self, x):
        return x.detach()


CASES = [zoo.DetachedEncoder, zoo.NoGradEncoder, zoo.TolistRebuild, zoo.UnusedAuxHead,
         zoo.RecreatedParameter, zoo.LeafInForward, zoo.DeadReLU, zoo.MultipliedByZero,
         zoo.InferenceModeEncoder, zoo.FloatRebuild, zoo.TensorOfTensors, zoo.DataAttribute,
         zoo.DetachEveryBlock, CutInsideABlock, zoo.CleanFrozenBackbone, zoo.mlp]


@pytest.mark.parametrize("make", CASES, ids=lambda c: c.__name__)
def test_screened_findings_are_those_of_the_full_window(make):
    on, off = _run(make, True), _run(make, False)
    assert on == off
    if make not in (zoo.CleanFrozenBackbone, zoo.mlp):
        assert on  # (a case with a bug: something to compare)


def test_a_loss_without_grad_fn_in_the_screening_step_names_the_block_that_cut_it():
    on, off = _run(LossDetachedInABlock, True, raises=True), _run(LossDetachedInABlock, False, raises=True)
    assert on == off
    (f,) = [f for f in on if f[0] == "gradient.loss_no_grad_fn"]
    assert (f[4], f[6]) == ("body.1", "Tensor.detach")
