"""The gradient chain (issue 4): each cause with a real tiny model, its location, and silence
on intentional patterns (GAN D-step detach, teacher/EMA, gradient accumulation, frozen layers)."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from tests.zoo import gradients as zoo

import torchtriage
from _lines import line_in
from torchtriage import Category, Severity, Stage
from torchtriage.report import render_json  # noqa: F401  (JSON renderer is part of the contract)

_line = line_in


def _data(seed=0, n=16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)


def _train(model, opt, steps=3, zero_grad=True):
    x, y = _data()
    for _ in range(steps):
        loss = F.mse_loss(model(x), y)
        if zero_grad:
            opt.zero_grad()
        loss.backward()
        opt.step()


def _watch(model, opt, steps=3, **kw):
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        _train(model, opt, steps, **kw)
    assert torch.overrides._get_current_function_mode_stack() == []
    return s.report


def _one(report, code):
    found = report.filter(code=code)
    assert len(found) == 1, [f.code for f in report]
    f = found[0]
    assert f.category is Category.GRADIENT
    return f


def _same_file(path, module):
    return path is not None and os.path.samefile(path, inspect.getsourcefile(module))


# ---------------------------------------------------------------- cut paths (seed Q4)
def test_detach_names_op_module_and_line():
    model = zoo.DetachedEncoder()
    f = _one(_watch(model, torch.optim.SGD(model.parameters(), lr=0.1)), "gradient.cut_detach")
    assert (f.severity, f.stage, f.step, f.module, f.op) == (Severity.ERROR, Stage.FORWARD, 0, "", "Tensor.detach")
    assert f.parameter == "enc.weight" and f.evidence["parameters"] == ["enc.weight", "enc.bias"]
    assert _same_file(f.file, zoo) and f.line == _line(zoo.DetachedEncoder.forward, "CUT: detach")
    assert f.message.startswith("2 parameter(s) (enc.weight, ...) get no gradient: "
                                "their path to the loss is cut by Tensor.detach")


def test_no_grad_names_module_and_line():
    model = zoo.NoGradEncoder()
    f = _one(_watch(model, torch.optim.SGD(model.parameters(), lr=0.1)), "gradient.cut_no_grad")
    assert (f.module, f.parameter, f.stage) == ("enc", "enc.weight", Stage.FORWARD)
    assert f.line == _line(zoo.NoGradEncoder.forward, "CUT: no_grad")
    assert "ran under torch.no_grad()" in f.message


def test_tolist_then_tensor_is_a_cut():
    model = zoo.TolistRebuild()
    f = _one(_watch(model, torch.optim.SGD(model.parameters(), lr=0.1)), "gradient.cut_to_python")
    assert (f.op, f.module, f.parameter) == ("Tensor.tolist", "", "enc.weight")
    assert f.line == _line(zoo.TolistRebuild.forward, "CUT: tolist")


def test_seed_g3_item_rebuild_explained_before_backward_fails():
    x = torch.tensor(2.0, requires_grad=True)
    with torchtriage.watch(on_anomaly="record", report=False) as s:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # PyTorch warns on item() of a tensor requiring grad
            rebuilt = torch.tensor(x.item() ** 2); line = inspect.currentframe().f_lineno  # noqa: E702
        with pytest.raises(RuntimeError, match="does not require grad"):
            rebuilt.backward()
    f = _one(s.report, "gradient.loss_no_grad_fn")
    assert (f.stage, f.op, f.line, f.file) == (Stage.BACKWARD, "Tensor.item", line, __file__)
    assert f.evidence["rebuilt_by"] == "torch.tensor" and f.evidence["grad_fn"] is None
    assert "rebuilt from Python numbers: Tensor.item at" in f.cause

    # fixed: keep the computation in tensors -> d(x^2)/dx = 4 and nothing to report
    x = torch.tensor(2.0, requires_grad=True)
    with torchtriage.watch(on_anomaly="record", report=False) as s:
        (x ** 2).backward()
    assert x.grad.item() == 4.0
    assert not s.report.filter(category="gradient")


def test_loss_under_no_grad_names_the_cause():
    model = zoo.mlp()
    x, y = _data()
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        with torch.no_grad():
            out = model(x); line = inspect.currentframe().f_lineno  # noqa: E702
        with pytest.raises(RuntimeError, match="does not require grad"):
            F.mse_loss(out, y).backward()
    f = _one(s.report, "gradient.loss_no_grad_fn")
    assert f.line == line and f.cause.startswith("the forward ran under torch.no_grad()")


# ---------------------------------------------------------------- not registered
def test_plain_tensor_attribute_is_unregistered():
    model = zoo.PlainTensorAttribute()
    f = _one(_watch(model, torch.optim.SGD(model.parameters(), lr=0.1)), "gradient.unregistered_tensor")
    assert (f.module, f.parameter, f.severity, f.stage) == ("", "w", Severity.ERROR, Stage.PARAMETER)
    assert f.next_check == "wrap it: self.w = nn.Parameter(...)"


def test_python_list_of_layers_is_unregistered():
    model = zoo.PythonListOfLayers()
    f = _one(_watch(model, torch.optim.SGD(model.parameters(), lr=0.1)), "gradient.unregistered_modules")
    assert (f.module, f.parameter) == ("", "blocks")
    assert f.evidence["items"] == ["blocks[0]", "blocks[1]"] and f.evidence["values"] == 40
    assert f.next_check == "use nn.ModuleList instead of a Python list"


def test_parameter_recreated_in_forward():
    model = zoo.RecreatedParameter()
    report = _watch(model, torch.optim.SGD(model.parameters(), lr=0.1))
    f = _one(report, "gradient.param_recreated")
    assert (f.module, f.parameter, f.stage, f.step) == ("", "scale", Stage.FORWARD, 0)
    assert _same_file(f.file, zoo) and f.line == _line(zoo.RecreatedParameter.forward, "BUG: new Parameter")
    # one cause, said once: not again as a stale optimizer, an unoptimized parameter or a stray leaf
    assert [g.code for g in report.filter(category="gradient")] == ["gradient.param_recreated"]


def test_leaf_created_in_forward_is_not_registered():
    model = zoo.LeafInForward()
    f = _one(_watch(model, torch.optim.SGD(model.parameters(), lr=0.1)), "gradient.leaf_not_registered")
    assert (f.op, f.module, f.evidence["shape"]) == ("torch.ones", "", [4, 1])
    assert f.line == _line(zoo.LeafInForward.forward, "BUG: leaf")


# ---------------------------------------------------------------- not used
def test_module_never_called():
    model = zoo.UnusedAuxHead()
    f = _one(_watch(model, torch.optim.SGD(model.parameters(), lr=0.1)), "gradient.unused")
    assert (f.module, f.parameter, f.severity) == ("aux", "aux.weight", Severity.WARNING)
    assert f.evidence["parameters"] == ["aux.weight", "aux.bias"]


# ---------------------------------------------------------------- optimizer
def test_not_in_optimizer():
    model = zoo.mlp()
    opt = torch.optim.SGD(model[0].parameters(), lr=0.1)
    f = _one(_watch(model, opt), "gradient.not_in_optimizer")
    assert (f.module, f.parameter, f.stage, f.evidence["count"]) == ("2", "2.weight", Stage.OPTIMIZER, 2)


def test_optimizer_built_before_model_replaced():
    model = zoo.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model = zoo.mlp(seed=2)  # replaced: opt still holds the old parameters
    report = _watch(model, opt)
    f = _one(report, "gradient.optimizer_stale")
    assert (f.evidence["not_in_model"], f.evidence["missing"], f.stage) == (4, 4, Stage.OPTIMIZER)
    assert not report.filter(code="gradient.not_in_optimizer")


def test_learning_rate_zero():
    model = zoo.mlp()
    f = _one(_watch(model, torch.optim.SGD(model.parameters(), lr=0.0)), "gradient.lr_zero")
    assert (f.evidence["group"], f.evidence["lr"], f.evidence["steps"]) == (0, 0.0, 2)


def test_lr_warmup_from_zero_is_not_flagged():
    model = zoo.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 5))
    x, y = _data()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
            sched.step()
    assert not s.report.filter(code="gradient.lr_zero")


# ---------------------------------------------------------------- zero gradients
def test_dead_relu_zero_gradient():
    model = zoo.DeadReLU()
    report = _watch(model, torch.optim.SGD(model.parameters(), lr=0.1))
    f, downstream = report.filter(code="gradient.zero")  # fc2.weight too: its input is all zeros
    assert (f.module, f.parameter, f.evidence["output_ever_positive"]) == ("fc1", "fc1.weight", False)
    assert f.evidence["parameters"] == ["fc1.weight", "fc1.bias"] and downstream.parameter == "fc2.weight"
    assert (f.cause
            == "fc1's outputs were never positive on this batch: a following ReLU passes no gradient (dead units)")


def test_multiplied_by_zero():
    model = zoo.MultipliedByZero()
    f = _one(_watch(model, torch.optim.SGD(model.parameters(), lr=0.1)), "gradient.zero")
    assert (f.module, f.evidence["parameters"]) == ("branch", ["branch.weight", "branch.bias"])
    assert f.cause.startswith("the path exists but carries zero")


def test_l1_bias_gradient_cancelling_exactly_is_quiet():
    """L1's gradient is sign(residual) / N: balanced residuals cancel the bias's gradient exactly."""
    model = nn.Linear(4, 1)
    x = torch.randn(16, 4)
    with torch.no_grad():
        y = model(x) + torch.tensor([1.0, -1.0]).repeat(8).unsqueeze(1)  # 8 above, 8 below
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            opt.zero_grad()
            F.l1_loss(model(x), y).backward()
            assert model.bias.grad.item() == 0.0 and model.weight.grad.abs().sum().item() > 0
            opt.step()
    assert not s.report, [f.code for f in s.report]


# ---------------------------------------------------------------- loop habits
def test_zero_grad_missing():
    model = zoo.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchtriage.watch(model, opt, checks=["gradients"], on_anomaly="record", report=False) as s:
        _train(model, opt, 3, zero_grad=False)
    f = _one(s.report, "gradient.zero_grad_missing")
    assert (f.severity, f.step, f.parameter) == (Severity.WARNING, 1, "0.weight")


def test_zero_grad_missing_is_reported_once_with_all_checks():
    model = zoo.mlp()
    report = _watch(model, torch.optim.SGD(model.parameters(), lr=0.01), zero_grad=False)
    assert [f.code for f in report if "zero_grad" in f.code] == ["silent.zero_grad_missing"]


def test_gradient_accumulation_is_not_missing_zero_grad():
    model = zoo.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = _data()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(8):  # 4 micro-batches per step, zero_grad right after step
            (F.mse_loss(model(x[i % 4 * 4:][:4]), y[i % 4 * 4:][:4]) / 4).backward()
            if (i + 1) % 4 == 0:
                opt.step()
                opt.zero_grad()
    assert s.step == 2 and not s.report.filter(category="gradient")


def test_nonleaf_grad_read():
    model = zoo.mlp()
    x, y = _data()
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        out = model(x)
        F.mse_loss(out, y).backward()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # PyTorch's own non-leaf .grad warning
            assert out.grad is None; line = inspect.currentframe().f_lineno  # noqa: E702
    f = _one(s.report, "gradient.nonleaf_grad")
    assert (f.line, f.evidence["shape"], f.severity) == (line, [16, 1], Severity.WARNING)


def test_eval_without_no_grad_builds_graph_and_no_grad_is_quiet():
    model = zoo.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = _data()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        _train(model, opt, 1)
        model.eval()
        with torch.no_grad():
            model(x)
        model.train()
        _train(model, opt, 1)
    assert not s.report.filter(category="gradient")
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        _train(model, opt, 1)
        model.eval()
        model(x); line = inspect.currentframe().f_lineno  # noqa: E702
        model.train()
        _train(model, opt, 1)
    f = _one(s.report, "gradient.eval_builds_graph")
    assert (f.severity, f.line) == (Severity.INFO, line)


# ---------------------------------------------------------------- intentional patterns stay quiet
def test_clean_frozen_backbone_reports_infos_only():
    model = zoo.CleanFrozenBackbone()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    report = _watch(model, opt)
    assert report.ok
    f = _one(report, "gradient.frozen")
    assert (f.severity, f.module, f.evidence["parameters"], f.evidence["values"]) == (Severity.INFO, "backbone", 4, 112)


def test_gan_discriminator_step_detach_is_quiet():
    torch.manual_seed(0)
    G, D = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 4)), nn.Sequential(nn.Linear(4, 1))
    og, od = torch.optim.Adam(G.parameters(), 1e-3), torch.optim.Adam(D.parameters(), 1e-3)
    real = torch.randn(8, 4)
    with torchtriage.watch([G, D], [od, og], on_anomaly="record", report=False) as s:
        for _ in range(3):
            fake = G(torch.randn(8, 2))
            od.zero_grad()
            d_loss = F.softplus(-D(real)).mean() + F.softplus(D(fake.detach())).mean()
            d_loss.backward()
            od.step()
            og.zero_grad()
            F.softplus(-D(fake)).mean().backward()
            og.step()
    assert not s.report.filter(category="gradient")


def test_teacher_and_ema_outside_optimizer_are_quiet():
    torch.manual_seed(0)

    class Distill(nn.Module):
        def __init__(self):
            super().__init__()
            self.student = nn.Linear(4, 1)
            self.teacher = nn.Linear(4, 1)  # requires_grad=True, but run under no_grad, not optimized
            self.ema = nn.Linear(4, 1)  # updated by hand, never in the loss

        def forward(self, x):
            with torch.no_grad():
                t = self.teacher(x)
            return self.student(x), t

    model = Distill()
    opt = torch.optim.SGD(model.student.parameters(), lr=0.1)
    x, _ = _data()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            out, t = model(x)
            opt.zero_grad()
            F.mse_loss(out, t).backward()
            opt.step()
            with torch.no_grad():
                for e, p in zip(model.ema.parameters(), model.student.parameters()):
                    e.mul_(0.9).add_(p, alpha=0.1)
    assert not s.report.filter(category="gradient")


def test_whole_frozen_teacher_model_is_not_an_info():
    teacher, student = nn.Linear(4, 1).requires_grad_(False), nn.Linear(4, 1)
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    x, _ = _data()
    with torchtriage.watch([student, teacher], opt, on_anomaly="record", report=False) as s:
        for _ in range(2):
            with torch.no_grad():
                t = teacher(x)
            opt.zero_grad()
            F.mse_loss(student(x), t).backward()
            opt.step()
    assert not s.report, [f.code for f in s.report]


def _wgan(steps_g=2, n_critic=5, detach_in_g_step=False):
    torch.manual_seed(0)
    G, D = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 4)), nn.Sequential(nn.Linear(4, 1))
    og, od = torch.optim.Adam(G.parameters(), 1e-3), torch.optim.Adam(D.parameters(), 1e-3)
    real = torch.randn(8, 4)
    with torchtriage.watch([G, D], [od, og], on_anomaly="record", report=False) as s:
        for _ in range(steps_g):
            for _ in range(n_critic):
                od.zero_grad()
                fake = G(torch.randn(8, 2)).detach()
                a = torch.rand(8, 1)
                mixed = (a * real + (1 - a) * fake).requires_grad_(True)
                grad, = torch.autograd.grad(D(mixed).sum(), mixed, create_graph=True)
                (D(fake).mean() - D(real).mean() + ((grad.norm(dim=1) - 1) ** 2).mean()).backward()
                od.step()
            og.zero_grad()
            fake = G(torch.randn(8, 2))
            (-D(fake.detach() if detach_in_g_step else fake).mean()).backward()
            og.step()
    return s.report


def test_wgan_gp_generator_stepping_every_fifth_step_is_quiet():
    """The window waits for G's optimizer; the penalty's input leaf is fed to D, not a parameter."""
    report = _wgan()
    assert not report.filter(category="gradient"), [f.code for f in report]


def test_wgan_generator_cut_in_its_own_step_is_caught():
    (cut,) = _wgan(detach_in_g_step=True).filter(code="gradient.cut_detach")
    src = inspect.getsource(_wgan).splitlines()
    g_step_line = inspect.getsourcelines(_wgan)[1] + next(i for i, t in enumerate(src) if "detach_in_g_step else" in t)
    # G's four parameters, blamed on the G step's detach, not on the D step's intentional one
    assert (cut.line, cut.evidence["parameters"]) == (g_step_line, ["0.weight", "0.bias", "2.weight", "2.bias"])


def test_module_used_every_third_step_is_quiet():
    model = zoo.UnusedAuxHead()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(6):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            if i % 3 == 2:
                loss = loss + F.mse_loss(model.aux(torch.relu(model.enc(x))), y)
            loss.backward()
            opt.step()
    assert not s.report.filter(category="gradient"), [f.code for f in s.report]


def test_scheduled_lr_that_rises_late_is_quiet_and_one_that_stays_zero_is_reported():
    def run(factor):
        model = zoo.mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
            for _ in range(3):  # epochs of 3 steps, scheduler stepped per epoch
                _train(model, opt, 3)
                sched.step()
        return s.report

    assert not run(lambda epoch: min(1.0, epoch / 2)).filter(code="gradient.lr_zero")
    f = _one(run(lambda epoch: 0.0), "gradient.lr_zero")
    assert (f.evidence["group"], f.evidence["lr"]) == (0, 0.0)


def test_zero_gradient_behind_a_constant_zero_gate_is_caught_under_warmup():
    model = zoo.MultipliedByZero()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 5))
    x, y = _data()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(5):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
            sched.step()
    assert _one(s.report, "gradient.zero").module == "branch"


class _ZeroInitResidual(nn.Module):
    """A residual block whose last norm starts at 0 (torchvision's `zero_init_residual=True`)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 4)
        self.bn2 = nn.BatchNorm1d(4)
        nn.init.zeros_(self.bn2.weight)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(x + self.bn2(self.fc2(torch.relu(self.fc1(x)))))


def test_zero_init_residual_under_a_hand_written_warmup_from_zero_is_quiet():
    # the branch's gradient is exactly zero until bn2.weight has moved, and the lr is set by hand
    # from 0 (no LRScheduler to say so, as LARS recipes do): zero in the window, not over the run
    torch.manual_seed(0)
    model = _ZeroInitResidual()
    opt = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for step in range(12):
            for g in opt.param_groups:
                g["lr"] = 0.05 * min(1.0, step / 6)
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    assert not s.report.filter(code="gradient.zero"), str(s.report)
    assert model.fc1.weight.grad.abs().sum() > 0  # the gate opened: the branch trains


def test_a_zero_gradient_that_stays_zero_over_the_run_is_still_named():
    model = zoo.MultipliedByZero()
    f = _one(_watch(model, torch.optim.SGD(model.parameters(), lr=0.1), steps=8), "gradient.zero")
    assert f.module == "branch" and f.evidence["later_gradients_all_zero"] >= 5


def test_numerics_bitwise_identical():
    m1, m2 = zoo.mlp(), zoo.mlp()
    o1, o2 = torch.optim.Adam(m1.parameters(), 1e-2), torch.optim.Adam(m2.parameters(), 1e-2)
    _train(m1, o1, 5)
    with torchtriage.watch(m2, o2, checks=["gradients"], on_anomaly="record", report=False):
        _train(m2, o2, 5)
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))


# ---------------------------------------------------------------- diagnose_gradients and JSON
def test_diagnose_gradients_with_a_loss_function_and_json():
    model = zoo.DetachedEncoder()
    x, y = _data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    report = torchtriage.diagnose_gradients(model, lambda: F.mse_loss(model(x), y), opt)
    f = _one(report, "gradient.cut_detach")
    assert f.line == _line(zoo.DetachedEncoder.forward, "CUT: detach")
    assert all(p.grad is None for p in model.parameters())  # .grad never written
    data = json.loads(json.dumps(report.to_dict()))
    assert [d["category"] for d in data["findings"]] == ["gradient"]
    assert data["findings"][0]["code"] == "gradient.cut_detach"


def test_diagnose_gradients_with_a_tensor_clean_and_broken():
    model = zoo.mlp()
    x, y = _data()
    assert not torchtriage.diagnose_gradients(model, F.mse_loss(model(x), y), torch.optim.SGD(model.parameters(), 0.1))
    model = zoo.UnusedAuxHead()
    report = torchtriage.diagnose_gradients(model, F.mse_loss(model(x), y))
    f = _one(report, "gradient.unreached")
    assert (f.module, f.evidence["parameters"], f.stage) == ("aux", ["aux.weight", "aux.bias"], Stage.BACKWARD)
    assert f.message == "2 parameter(s) of aux get no gradient from any loss"


def test_diagnose_gradients_bad_input():
    with pytest.raises(TypeError, match="takes an nn.Module as model, got int"):
        torchtriage.diagnose_gradients(3, torch.zeros(()))
    with pytest.raises(TypeError, match="a loss tensor or a function returning one, got str"):
        torchtriage.diagnose_gradients(zoo.mlp(), "loss")
    with pytest.raises(TypeError, match="as optimizer, got dict"):
        torchtriage.diagnose_gradients(zoo.mlp(), torch.zeros(()), {})


def test_example_script_under_run(tmp_path):
    from tests.conftest import EXAMPLES, run_cli

    out = tmp_path / "report.json"
    proc = run_cli("run", "--checks", "gradients", "--json", str(out), str(EXAMPLES / "grad_not_in_optimizer.py"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    found = [d for d in data["findings"] if d["code"] == "gradient.not_in_optimizer"]
    assert len(found) == 1 and found[0]["category"] == "gradient"
    assert (found[0]["module"], found[0]["parameter"], found[0]["step"]) == ("head", "head.weight", 0)


# ---------------------------------------------------------------- review: more cuts, each once
def test_inference_mode_cut_says_inference_mode():
    model = zoo.InferenceModeEncoder()
    f = _one(_watch(model, torch.optim.SGD(model.parameters(), lr=0.1)), "gradient.cut_no_grad")
    assert (f.module, f.parameter, f.stage, f.step) == ("enc", "enc.weight", Stage.FORWARD, 0)
    assert f.line == _line(zoo.InferenceModeEncoder.forward, "CUT: inference_mode")
    assert "enc ran under torch.inference_mode() (" in f.message
    assert f.next_check == "run the training forward outside torch.inference_mode()"


def test_float_then_tensor_is_a_cut():
    model = zoo.FloatRebuild()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyTorch's own "converting a tensor ... to a scalar"
        report = _watch(model, torch.optim.SGD(model.parameters(), lr=0.1))
    f = _one(report, "gradient.cut_to_python")
    assert ((f.op, f.parameter, f.evidence["parameters"])
            == ("Tensor.float", "gate.weight", ["gate.weight", "gate.bias"]))
    assert f.line == _line(zoo.FloatRebuild.forward, "CUT: float")


def test_tensor_of_tensors_names_torch_tensor_for_every_input():
    model = zoo.TensorOfTensors()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyTorch's own "converting a tensor ... to a scalar"
        report = _watch(model, torch.optim.SGD(model.parameters(), lr=0.1))
    f = _one(report, "gradient.cut_to_python")
    assert (f.op, f.module, f.line) == ("torch.tensor", "", _line(zoo.TensorOfTensors.forward, "CUT: torch.tensor"))
    assert f.evidence["parameters"] == ["a.weight", "a.bias", "b.weight", "b.bias"]
    assert not report.filter(code="gradient.unreached") and not report.filter(code="gradient.cut_detach")


def test_data_attribute_is_a_detach_and_our_own_probes_are_not():
    model = zoo.DataAttribute()
    f = _one(_watch(model, torch.optim.SGD(model.parameters(), lr=0.1)), "gradient.cut_detach")
    assert (f.op, f.parameter, f.line) == ("Tensor.data", "enc.weight", _line(zoo.DataAttribute.forward, "CUT: data"))


def test_detach_in_a_loop_covers_every_block():
    model = zoo.DetachEveryBlock()
    f = _one(_watch(model, torch.optim.SGD(model.parameters(), lr=0.1)), "gradient.cut_detach")
    assert f.evidence["parameters"] == ["blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias"]
    assert f.line == _line(zoo.DetachEveryBlock.forward, "CUT: loop")


def test_python_dict_of_layers_and_list_of_tensors_each_reported_once():
    model = zoo.PythonDictOfLayersAndTensors()
    report = _watch(model, torch.optim.SGD(model.parameters(), lr=0.1))
    mods = _one(report, "gradient.unregistered_modules")
    assert (mods.parameter, mods.evidence["items"], mods.next_check) == (
        "heads", ["heads['a']", "heads['b']"], "use nn.ModuleDict instead of a Python dict")
    tens = _one(report, "gradient.unregistered_tensor")
    assert (tens.parameter, tens.evidence["items"], tens.next_check) == (
        "extra", ["extra[0]"], "use nn.ParameterList instead of a Python list")
    assert not report.filter(code="gradient.leaf_not_registered")  # the same tensors: said once


def test_two_root_modules_of_one_class_are_not_recreated_parameters():
    torch.manual_seed(0)
    enc, head = nn.Linear(4, 8), nn.Linear(8, 1)  # both labelled "Linear"
    opt = torch.optim.SGD([*enc.parameters(), *head.parameters()], lr=0.1)
    x, y = _data()
    with torchtriage.watch([enc, head], opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            opt.zero_grad()
            F.mse_loss(head(torch.relu(enc(x))), y).backward()
            opt.step()
    assert not s.report.filter(category="gradient"), [f.code for f in s.report]


def test_stale_optimizer_names_the_line_that_built_it(tmp_path):
    from tests.conftest import run_cli

    script = tmp_path / "stale.py"
    script.write_text(
        "import torch, torch.nn as nn, torch.nn.functional as F\n"
        "make = lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))\n"
        "model = make()\n"
        "opt = torch.optim.Adam(model.parameters(), 1e-3)\n"
        "model = make()\n"
        "x, y = torch.randn(8, 4), torch.randn(8, 1)\n"
        "for _ in range(3):\n"
        "    opt.zero_grad(); F.mse_loss(model(x), y).backward(); opt.step()\n")
    out = tmp_path / "r.json"
    proc = run_cli("run", "--checks", "gradients", "--json", str(out), str(script))
    assert proc.returncode == 0, proc.stderr
    found = [d for d in json.loads(out.read_text())["findings"] if d["category"] == "gradient"]
    assert [(d["code"], d["stage"], d["line"]) for d in found] == [("gradient.optimizer_stale", "optimizer", 4)]
    assert found[0]["evidence"]["not_in_model"] == 4


@pytest.mark.parametrize("case", ["detach", "inference_mode", "frozen", "leaf"])
def test_loss_without_grad_fn_names_each_cause_once(case):
    model = zoo.mlp()
    x, y = _data()
    if case == "frozen":
        model.requires_grad_(False)
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        if case == "detach":
            out = model(x).detach(); line = inspect.currentframe().f_lineno  # noqa: E702
        elif case == "inference_mode":
            with torch.inference_mode():
                out = model(x); line = inspect.currentframe().f_lineno  # noqa: E702
            out = out.clone()
        elif case == "frozen":
            out = model(x)
        else:
            out = torch.zeros(16, 1)
        loss = F.mse_loss(out, y)
        bline = inspect.currentframe().f_lineno + 2
        with pytest.raises(RuntimeError, match="does not require grad"):
            loss.backward()
    f = _one(s.report, "gradient.loss_no_grad_fn")
    assert (f.stage, f.step, f.severity) == (Stage.BACKWARD, 0, Severity.ERROR)
    causes = {"detach": "the path to the loss was cut by Tensor.detach at ",
              "inference_mode": "the forward ran under torch.inference_mode() (",
              "frozen": "every parameter of the model has requires_grad=False",
              "leaf": "the loss was built only from tensors created with requires_grad=False"}
    assert f.cause.startswith(causes[case])
    assert f.line == (line if case in ("detach", "inference_mode") else bline)
    if case == "detach":
        assert f.op == "Tensor.detach"
    # the per-parameter analysis does not say the same cut again
    assert [g.code for g in s.report.filter(severity="error")] == ["gradient.loss_no_grad_fn"]


def _gan(d_zero_grad=True, steps=3):
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 4))
    D = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    og, od = torch.optim.Adam(G.parameters(), 1e-3), torch.optim.Adam(D.parameters(), 1e-3)
    real = torch.randn(8, 4)
    with torchtriage.watch([G, D], [od, og], on_anomaly="record", report=False) as s:
        for _ in range(steps):
            fake = G(torch.randn(8, 2))
            if d_zero_grad:
                od.zero_grad()
            d_loss = F.softplus(-D(real)).mean() + F.softplus(D(fake.detach())).mean()
            d_loss.backward(); line = inspect.currentframe().f_lineno  # noqa: E702
            od.step()
            og.zero_grad()
            F.softplus(-D(fake)).mean().backward()  # adds into D's grads: D clears them next time
            og.step()
    return s.report, line


def test_gan_two_optimizers_with_all_checks_is_not_missing_zero_grad():
    report, _ = _gan()
    assert not [f.code for f in report if "zero_grad" in f.code or f.category is Category.GRADIENT]


def test_gan_discriminator_without_zero_grad_is_reported_at_its_backward():
    report, line = _gan(d_zero_grad=False)
    found = [f for f in report if "zero_grad" in f.code]
    assert [(f.code, f.line, f.parameter, f.step) for f in found] == [("silent.zero_grad_missing", line, "0.weight", 1)]


def test_missing_zero_grad_with_micro_batches_is_reported():
    model = zoo.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = _data()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            for micro in range(2):
                F.mse_loss(model(x[micro::2]), y[micro::2]).backward()
            opt.step()
    f = s.report.filter(code="silent.zero_grad_missing")
    assert len(f) == 1 and (f[0].step, f[0].parameter) == (1, "0.weight")


def test_a_finding_made_right_after_the_update_belongs_to_that_step():
    model = zoo.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = _data()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        out = model(x)
        opt.zero_grad()
        F.mse_loss(out, y).backward()
        opt.step()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # PyTorch's own non-leaf .grad warning
            assert out.grad is None  # read after step 0's update, before any new forward
    f = _one(s.report, "gradient.nonleaf_grad")
    assert (f.step, s.report.meta["steps"]) == (0, 1)


def test_an_encoder_kept_under_no_grad_for_its_first_updates_is_quiet():
    # fairseq's `freeze_finetune_updates`: the encoder runs under no_grad for the first N updates,
    # then trains; the window sees the cut, the run does not keep it (issue 24)
    torch.manual_seed(0)
    encoder, head = nn.Linear(4, 8), nn.Linear(8, 1)
    model = nn.ModuleDict({"encoder": encoder, "head": head})
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for step in range(10):
            with torch.no_grad() if step < 4 else contextlib.nullcontext():
                h = encoder(x)
            loss = F.mse_loss(head(h), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not s.report.filter(code="gradient.cut_no_grad"), str(s.report)


def test_an_encoder_under_no_grad_for_the_whole_run_is_named():
    torch.manual_seed(0)
    encoder, head = nn.Linear(4, 8), nn.Linear(8, 1)
    model = nn.ModuleDict({"encoder": encoder, "head": head})
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(10):
            with torch.no_grad():
                h = encoder(x)
            loss = F.mse_loss(head(h), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    f = _one(s.report, "gradient.cut_no_grad")
    assert f.module == "encoder" and f.evidence["later_gradients_all_zero"] == 0
