"""`module.requires_grad = False` freezes nothing: its parameters move (session 10)."""

from __future__ import annotations

import torch
from torch import nn

import torchtriage


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def _train(model, params, freeze=lambda m: None, *, before: bool = False):
    if before:
        freeze(model)
    opt = torch.optim.Adam(params(model), lr=0.01)
    with torchtriage.watch(model, optimizer=opt, on_anomaly="record") as s:
        if not before:
            freeze(model)
        for _ in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return [f for f in s.report.findings if f.severity in ("warning", "error")]


def _attribute(model):
    model[2].requires_grad = False  # the user's line


def test_module_attribute_freezes_nothing_and_the_layer_moves():
    (f,) = _train(_net(), lambda m: m.parameters(), _attribute)
    assert f.code == "gradient.module_flag_not_frozen" and f.severity == "warning"
    assert f.message == ("2.requires_grad = False set an attribute on the Linear module, not on its parameters: "
                         "2 of its 2 parameters still require grad, and Adam.step() moved them (step 0)")
    assert f.line == _attribute.__code__.co_firstlineno + 1
    assert f.evidence["source_line"] == "model[2].requires_grad = False  # the user's line"
    assert f.evidence["parameters_moved_by_step"] == ["2.weight", "2.bias"] and f.evidence["values"] == 9
    assert f.module == "2" and f.parameter == "2.weight"


def test_attribute_set_before_the_session_is_found_on_the_watched_model():
    (f,) = _train(_net(), lambda m: m.parameters(), _attribute, before=True)
    assert f.code == "gradient.module_flag_not_frozen"
    assert f.line == _attribute.__code__.co_firstlineno + 1 and f.evidence["module"] == "2"


def test_requires_grad_method_is_quiet():
    assert _train(_net(), lambda m: m.parameters(), lambda m: m[2].requires_grad_(False)) == []


def test_attribute_with_the_layer_left_out_of_the_optimizer_is_quiet():
    # the fixed twin's way: the flag is still set, but the optimizer does not hold the layer
    found = _train(_net(), lambda m: m[0].parameters(), _attribute)
    assert [f for f in found if f.code == "gradient.module_flag_not_frozen"] == []


def test_attribute_and_real_freeze_together_are_quiet():
    def both(m):
        m[2].requires_grad = False
        for p in m[2].parameters():
            p.requires_grad = False

    assert _train(_net(), lambda m: m.parameters(), both) == []
