"""Arithmetic on a `.grad` that is None: a hand-written gradient loop meets a frozen layer (session 10)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchtriage


def _model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    for p in model[0].parameters():  # a frozen first layer
        p.requires_grad = False
    return model


def _run(scale):
    model = _model()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)
    with pytest.raises(Exception) as e, torchtriage.watch(model, optimizer=opt, on_anomaly="record") as s:
        for _ in range(3):
            model(torch.randn(8, 4)).pow(2).mean().backward()
            scale(model)
            opt.step()
            opt.zero_grad()
    return e.value, [f for f in s.report.findings if f.severity == "error"]


def _scale_all(model):
    for param in model.parameters():
        param.grad *= 0.5


def _data_all(model):
    for param in model.parameters():
        param.grad.data.mul_(0.5)


def test_scaling_a_frozen_parameters_grad_names_the_parameter():
    exc, (f,) = _run(_scale_all)
    assert isinstance(exc, TypeError)
    assert f.code == "gradient.grad_none" and f.category == "gradient"
    assert f.message == ("param.grad is None: the line does arithmetic on the gradient of 0.weight (8x4, "
                         "requires_grad=False), which no backward wrote")
    assert f.file.endswith("test_triage_grad_none.py") and f.line == _scale_all.__code__.co_firstlineno + 2
    assert "if param.requires_grad" in f.next_check


def test_attribute_of_a_none_grad_is_the_same_diagnosis():
    exc, (f,) = _run(_data_all)
    assert isinstance(exc, AttributeError)
    assert f.code == "gradient.grad_none"
    assert "0.weight (8x4, requires_grad=False)" in f.message


def test_none_arithmetic_elsewhere_is_not_a_gradient_fault():
    def scale(model):
        factor = None
        model[2].weight.grad *= factor

    _, (f,) = _run(scale)
    assert f.code != "gradient.grad_none"


def test_loop_that_skips_frozen_parameters_is_quiet():
    model = _model()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)
    with torchtriage.watch(model, optimizer=opt, on_anomaly="record") as s:
        for _ in range(3):
            model(torch.randn(8, 4)).pow(2).mean().backward()
            for param in model.parameters():
                if param.requires_grad:
                    param.grad *= 0.5
            opt.step()
            opt.zero_grad()
    assert [f for f in s.report.findings if f.severity in ("warning", "error")] == []
