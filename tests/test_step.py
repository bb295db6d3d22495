"""The step record (issue 11): the first non-finite value in any step code — hand-written
losses, metrics, several model calls, functional code — with the op, the user's line and
`localized_by`, from a replay of the whole recorded step."""

from __future__ import annotations

import torch
import torch.nn as nn
from tests.zoo import step as zoo

import torchtriage
from _lines import line_in
from torchtriage import Severity, Stage

_line = line_in


def _errors(s):
    return [f for f in s.report.findings if f.severity is Severity.ERROR]


def test_siamese_contrastive_sqrt_at_distance_zero():
    torch.manual_seed(0)
    net = zoo.Embed()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with torchtriage.watch(net, opt, on_anomaly="record", report=False) as s:
        zoo.siamese_contrastive(net, opt)
    (f,) = _errors(s)
    assert (f.code, f.stage, f.step, f.op, f.module) == (
        "numerical.nonfinite_backward", Stage.BACKWARD, 0, "aten::sqrt", None)
    assert f.line == _line(zoo.siamese_contrastive, "BUG: sqrt at distance 0")
    assert f.evidence["localized_by"] == "step_replay"
    assert f.evidence["replayed"] == "2 model call(s), 13 op(s)"
    assert f.evidence["backward node"] == "SqrtBackward0" and f.evidence["zeros in saved result"] == 4
    assert f.parameter == "net.0.weight"
    assert f.evidence["parameters with non-finite gradients"] == [
        "net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]
    assert f.message == ("The forward pass is finite but the gradient is not: the backward of aten::sqrt, written "
                         f"outside the models at {f.file}:{f.line}, first produced NaN (step 0)")
    assert not s.report.filter(code="numerical.nonfinite_backward", severity="warning")  # no "not reproduced"


def test_sqrt_inside_where_behind_a_hand_written_loss_with_an_outside_target():
    torch.manual_seed(0)
    net = nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with torchtriage.watch(net, opt, on_anomaly="record", report=False) as s:
        zoo.where_behind_loss(net, opt)
    (f,) = _errors(s)
    assert (f.code, f.stage, f.op) == ("numerical.nonfinite_backward", Stage.BACKWARD, "aten::sqrt")
    assert f.line == _line(zoo.sqrt_where_loss, "BUG: sqrt of the branch not taken")
    assert f.evidence["source_line"].startswith("return torch.where(z > 0, torch.sqrt(z), z)")
    assert f.evidence["recorded op"] == "sqrt" and f.evidence["localized_by"] == "step_replay"
    assert f.parameter in ("weight", "bias")


def test_nan_in_a_metric_computed_before_backward():
    torch.manual_seed(0)
    net = nn.Linear(4, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with torchtriage.watch(net, opt, on_anomaly="record", report=False, checks=["nonfinite"]) as s:
        zoo.metric_before_backward(net, opt)
    (f,) = _errors(s)
    assert (f.code, f.stage, f.op, f.module) == ("numerical.nonfinite_loss", Stage.LOSS, "aten::log", None)
    assert f.line == _line(zoo.metric_before_backward, "BUG: log(0)")
    assert f.evidence["zeros in input"] == 24 and f.evidence["localized_by"] == "step_replay"


def test_functional_model_without_any_module():
    with torchtriage.watch(on_anomaly="record", report=False, discover=True) as s:
        opt, params = zoo.functional_model()
    (f,) = _errors(s)
    assert (f.code, f.stage, f.op, f.module) == ("numerical.nonfinite_loss", Stage.LOSS, "aten::div", None)
    assert f.line == _line(zoo.functional_model, "BUG: a zero row of the batch divides by 0")
    assert f.evidence["localized_by"] == "step_replay"
    # the parameters are the dict's tensors, named after it; the module is not a model
    assert s.param_index.name(params["weight"]) == "params['weight']"
    assert s.models == [] and not s.report.filter(category="gradient")


def test_step_record_keeps_every_call_and_the_external_inputs():
    torch.manual_seed(0)
    net = zoo.Embed()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    seen = {}

    class Peek(torchtriage.Checker):
        name = "peek"

        def on_backward(self, roots, grads):
            rec = self.session.snapshot.record
            internal = {id(t) for t, _ in self.session.param_index.tensors()}
            seen["calls"] = [(c.label, c.frame.line) for c in rec.calls]
            seen["inputs"] = [(tuple(t.shape), where) for t, where, _ in rec.external_inputs(internal)]

    with torchtriage.watch(net, opt, on_anomaly="record", report=False, checks=["nonfinite", Peek()]):
        zoo.siamese_contrastive(net, opt, steps=1)
    line = _line(zoo.siamese_contrastive, "e1 = net(x1)")
    assert seen["calls"] == [("net", line), ("net", line + 1)]  # the model by its variable
    # both inputs of the model and the pair labels the loss captured
    assert seen["inputs"] == [((8, 4), "net"), ((8, 4), "net"), ((8,), "mul")]


def test_tape_is_off_after_the_warm_up_and_armed_by_an_unlocalized_trip():
    torch.manual_seed(0)
    net = zoo.Embed()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    # skip_step: the bad update is not applied, so the next step trips again (not as a consequence)
    with torchtriage.watch(net, opt, on_anomaly="skip_step", report=False, checks=["nonfinite"],
                           step_tape_steps=0) as s:
        zoo.siamese_contrastive(net, opt, steps=3)
        assert torch.overrides._get_current_function_mode_stack() != []  # armed by step 0's trip
    assert torch.overrides._get_current_function_mode_stack() == []
    found = s.report.filter(code="numerical.nonfinite_backward")
    first = [f for f in found if f.severity is Severity.WARNING]
    assert first and first[0].evidence["why"].startswith("the ops outside the models were not recorded at this step")
    assert any(f.severity is Severity.ERROR and f.op == "aten::sqrt" for f in found)


def test_gan_finding_names_the_model_by_its_variable_and_the_page_marks_only_it():
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(2, 4), nn.Tanh())
    netD = nn.Sequential(nn.Linear(4, 4), zoo.LogFeatures(), nn.Linear(4, 1))
    optG = torch.optim.Adam(G.parameters(), 1e-3)
    optD = torch.optim.Adam(netD.parameters(), 1e-3)
    with torchtriage.watch([G, netD], [optD, optG], on_anomaly="record", report=False) as s:
        zoo.gan(G, netD, optG, optD)
    (f,) = _errors(s)
    assert (f.code, f.module, f.op, f.evidence["model"]) == ("numerical.nonfinite_forward", "1", "aten::log", "netD")
    assert f.message == "NaN first produced by aten::log in module 1 of netD during the forward pass (step 0)"
    assert f.line == _line(zoo.LogFeatures.forward, "BUG: log of negative features")
    assert list(s.report.meta["models"]) == ["G", "netD"]
    # one loss series per backward call site: D's loss and G's loss apart
    g_line = _line(zoo.gan, "g_loss.backward()")
    assert (sorted(k for k in s.series if not k.startswith("lr"))
            == sorted(["loss", f"loss step.py:{g_line}", "grad_norm"]))
    assert {"lr", "lr[1.0]"} <= set(s.series)  # optimizer 0 (optD) and optimizer 1 (optG), group 0 each
    from torchtriage._render._tree import render_tree

    marked_g = render_tree("G", s.report.meta["models"]["G"], s.report.findings)
    marked_d = render_tree("netD", s.report.meta["models"]["netD"], s.report.findings)
    assert marked_d != render_tree("netD", s.report.meta["models"]["netD"], ())
    assert marked_g == render_tree("G", s.report.meta["models"]["G"], ())


def test_seed_questions_answer_from_the_watched_run():
    from torchtriage._seed import diagnose_none_grad, first_nonfinite_step, locate_failure_zone

    torch.manual_seed(0)
    net = zoo.Embed()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with torchtriage.watch(net, opt, on_anomaly="record", report=False) as s:
        zoo.siamese_contrastive(net, opt)
    got = first_nonfinite_step(s)
    assert (got["index"], got["source"], got["op"], got["localized_by"]) == (0, "backward", "aten::sqrt", "step_replay")
    assert got["line"] == _line(zoo.siamese_contrastive, "BUG: sqrt at distance 0")
    assert locate_failure_zone(s.report)["zone"] == "gradient"

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 1, generator=g)
    means_coef = torch.rand(2, generator=g, requires_grad=True)
    log_scales = torch.zeros(2, requires_grad=True)
    opt = torch.optim.Adam([means_coef, log_scales], lr=0.05)
    with torchtriage.watch(None, opt, on_anomaly="record", report=False):
        for _ in range(3):
            opt.zero_grad()
            means = torch.tensor([means_coef[0].item(), means_coef[1].item()])
            ((x - means) / log_scales.exp()).pow(2).mean().backward()
            opt.step()
        why = diagnose_none_grad(means_coef)
    assert why.startswith("Tensor.item turns a tensor into Python numbers")


GMM_SCRIPT = '''
import torch

g = torch.Generator().manual_seed(0)
x = torch.randn(64, 1, generator=g)
means_coef = torch.rand(2, generator=g, requires_grad=True)
log_scales = torch.zeros(2, requires_grad=True)
opt = torch.optim.Adam([means_coef, log_scales], lr=0.05)
for step in range(3):
    opt.zero_grad()
    means = torch.tensor([means_coef[0].item(), means_coef[1].item()])
    d = (x - means) / log_scales.exp()
    loss = (d ** 2).mean() + log_scales.sum()
    loss.backward()
    opt.step()
'''


def test_torchtriage_run_names_the_raw_parameter_and_the_cut(tmp_path):
    import json

    from conftest import run_cli

    script = tmp_path / "gmm.py"
    script.write_text(GMM_SCRIPT, encoding="utf-8")
    out = tmp_path / "r.json"
    proc = run_cli("run", "--json", str(out), str(script), timeout=120)
    assert proc.returncode == 0, proc.stderr
    (f,) = [d for d in json.loads(out.read_text())["findings"] if d["category"] == "gradient"]
    assert ((f["code"], f["parameter"], f["op"], f["line"])
            == ("gradient.cut_to_python", "means_coef", "Tensor.item", 11))


def test_ops_on_the_batch_before_the_model():
    torch.manual_seed(0)
    net = nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with torchtriage.watch(net, opt, on_anomaly="record", report=False, checks=["nonfinite"]) as s:
        zoo.normalize_before_model(net, opt)
    (f,) = _errors(s)
    assert (f.code, f.stage, f.evidence["produced by"]) == ("numerical.nonfinite_data", Stage.DATA, "aten::div")
    assert f.line == _line(zoo.normalize_before_model, "BUG: a zero sample divides 0 by 0")
    assert f.evidence["localized_by"] == "step_record" and f.evidence["zeros in divisor"] == 1
    assert f.cause.startswith("division by zero")
