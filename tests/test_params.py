"""The session's parameter index (issue 11): raw tensors an optimizer holds are parameters,
named after the user's variable, and every gradient finding applies to them."""

from __future__ import annotations

import torch
import torch.nn as nn
from tests.zoo import step as zoo

import torchtriage
from _lines import line_in
from torchtriage import Severity, Stage

_line = line_in


def _run(fn, *args):
    # discover=True: the optimizer is learnt where it is built (as under `torchtriage run`)
    with torchtriage.watch(on_anomaly="record", report=False, discover=True) as s:
        out = fn(*args)
    return s, out


def test_gmm_means_rebuilt_from_item_names_the_variable_and_the_cut():
    s, _ = _run(zoo.gmm_item_rebuild)
    found = s.report.filter(category="gradient")
    assert [f.code for f in found] == ["gradient.cut_to_python"]
    f = found[0]
    assert (f.parameter, f.op, f.severity, f.stage, f.module) == (
        "means_coef", "Tensor.item", Severity.ERROR, Stage.FORWARD, None)
    assert f.line == _line(zoo.gmm_item_rebuild, "BUG: values leave the graph")
    assert f.evidence["parameters"] == ["means_coef"] and f.evidence["in_optimizer"] is True
    assert "means_coef" in f.message and "Tensor.item" in f.message


def test_correct_raw_parameters_are_quiet():
    s, _ = _run(zoo.gmm_correct)
    assert s.report.findings == ()


def test_style_transfer_adam_on_the_image_is_quiet():
    s, (features, opt, image) = _run(zoo.style_transfer)
    assert s.report.findings == ()  # the image is a parameter, not a stranger
    assert s.param_index.name(image) == "image"
    info = s.param_index.info(image)
    assert (info.raw, info.module, info.optimizer, info.group) == (True, None, 0, 0)


def test_raw_tensor_without_a_variable_is_named_by_its_place_and_groups_refresh():
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torchtriage.watch(model, opt, report=False) as s:
        assert s.param_index.name(model.weight) == "weight"
        opt.add_param_group({"params": [torch.zeros(3, requires_grad=True)], "lr": 0.01})
        # no variable holds it: named by its place (and keeps that name)
        assert s.param_index.name(opt.param_groups[1]["params"][0]) == "param_groups[1][0]"
        extra = opt.param_groups[1]["params"][0]
        info = s.param_index.info(extra)
        assert (info.raw, info.optimizer, info.group) == (True, 0, 1)
        assert s.param_index.info(torch.zeros(1)) is None


def test_raw_parameter_cut_by_detach_data_and_no_grad():
    x = torch.randn(16, 1)
    for cut, op in (("detach", "Tensor.detach"), ("data", "Tensor.data"), ("no_grad", "mul"),
                    ("tensor", "torch.tensor")):
        coef = torch.rand(2, requires_grad=True)
        scale = torch.ones(2, requires_grad=True)
        opt = torch.optim.SGD([coef, scale], lr=0.1)
        with torchtriage.watch(None, opt, on_anomaly="record", report=False) as s:
            for _ in range(2):
                opt.zero_grad()
                if cut == "detach":
                    c = coef.detach()
                elif cut == "data":
                    c = coef.data
                elif cut == "tensor":
                    c = torch.tensor(coef.tolist())
                else:
                    with torch.no_grad():
                        c = coef * 1
                loss = ((x - c) * scale).pow(2).mean()
                loss.backward()
                opt.step()
        found = s.report.filter(category="gradient")
        assert len(found) == 1 and found[0].parameter == "coef", (cut, [(f.code, f.parameter) for f in found])
        if cut == "tensor":
            assert (found[0].code, found[0].op) == ("gradient.cut_to_python", "Tensor.tolist")
        else:
            assert found[0].op == op, cut


def test_raw_parameter_zero_grad_unused_and_lr_zero():
    x = torch.randn(16, 1)
    coef = torch.rand(2, requires_grad=True)
    unused = torch.rand(2, requires_grad=True)
    opt = torch.optim.SGD([{"params": [coef]}, {"params": [unused], "lr": 0.0}], lr=0.1)
    with torchtriage.watch(None, opt, on_anomaly="record", report=False) as s:
        for _ in range(2):
            opt.zero_grad()
            loss = (x - coef * 0).pow(2).mean()
            loss.backward()
            opt.step()
    got = {(f.code, f.parameter) for f in s.report.filter(category="gradient")}
    assert got == {("gradient.zero", "coef"), ("gradient.unreached", "unused")}
    f = s.report.filter(code="gradient.unreached")[0]
    assert f.module is None and f.message == "unused is held by an optimizer but gets no gradient from any loss"


def test_leaf_no_optimizer_holds_is_at_most_info():
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(2):
            temperature = torch.ones(1, requires_grad=True)  # made outside the model, never optimized
            opt.zero_grad()
            (model(x) * temperature).pow(2).mean().backward()
            opt.step()
    found = s.report.filter(code="gradient.leaf_not_registered")
    assert [f.severity for f in found] == [Severity.INFO]
    assert found[0].message.startswith("the loss depends on a tensor [1] with requires_grad=True "
                                       "that no optimizer holds")


def test_leaf_no_optimizer_holds_whose_grad_grows_is_an_info():
    """A .grad that piles up while nothing reads, zeroes or applies it changes no number of the run,
    and a constant made with requires_grad=True (a mixture's fixed weights given to a distribution)
    looks the same as a forgotten weight: said, with the growth, as an info."""
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    temperature = torch.ones(1, requires_grad=True)  # made once, never optimized, never zeroed
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            opt.zero_grad()
            (model(x) * temperature).pow(2).mean().backward()
            opt.step()
    (f,) = s.report.filter(code="gradient.leaf_not_registered")
    assert f.severity is Severity.INFO
    assert "its .grad keeps growing" in f.message


def test_leaf_whose_grad_the_user_reads_each_step_is_not_a_warning():
    # a saliency map accumulated on purpose over the steps: .grad read, never zeroed
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    temperature = torch.ones(1, requires_grad=True)
    seen = []
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            opt.zero_grad()
            (model(x) * temperature).pow(2).mean().backward()
            opt.step()
            seen.append(temperature.grad.clone())  # read after the update: accumulated on purpose
    (f,) = s.report.filter(code="gradient.leaf_not_registered")
    assert f.severity is Severity.INFO
    assert f.message.startswith("the loss depends on a tensor [1] with requires_grad=True that no optimizer holds")
