"""The session frame: clean-up, step clock, stages, numerics unchanged, policy."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

import torchtriage
from torchtriage import Category, Finding, Severity, Stage
from torchtriage._checker import Checker


class Recorder(Checker):
    name = "recorder"

    def __init__(self):
        super().__init__()
        self.events = []

    def on_step_begin(self, step):
        self.events.append(("begin", step, self.session.stage))

    def on_root_forward(self, model, label, args, kwargs, output):
        self.events.append(("root", label, self.session.stage))

    def on_backward(self, roots, grads):
        self.events.append(("backward", self.session.stage))

    def on_optimizer_step_pre(self, optimizer):
        self.events.append(("opt", self.session.stage))

    def on_step_end(self, step):
        self.events.append(("end", step))


def _train(model, opt, steps=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 4, generator=g)
        y = torch.randn(8, 1, generator=g)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
    return losses


def _mlp():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def test_event_order_and_step_clock():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder()
    with torchtriage.watch(model, opt, checks=[rec], report=False) as s:
        _train(model, opt, steps=2)
    assert rec.events == [
        ("begin", 0, Stage.DATA), ("root", "model", Stage.LOSS), ("backward", Stage.BACKWARD),
        ("opt", Stage.OPTIMIZER), ("end", 0),
        ("begin", 1, Stage.DATA), ("root", "model", Stage.LOSS), ("backward", Stage.BACKWARD),
        ("opt", Stage.OPTIMIZER), ("end", 1),
    ]
    assert s.step == 2 and s.report.meta["steps"] == 2


def test_losses_and_parameters_bitwise_identical_with_all_checks():
    m1, m2 = _mlp(), _mlp()
    o1 = torch.optim.Adam(m1.parameters(), lr=1e-2)
    o2 = torch.optim.Adam(m2.parameters(), lr=1e-2)
    base = _train(m1, o1, steps=50)
    with torchtriage.watch(m2, o2, report=False) as s:
        watched = _train(m2, o2, steps=50)
    assert all(torch.equal(a, b) for a, b in zip(base, watched))
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    assert s.report.primary is None


def test_user_exception_is_reraised_unchanged_and_hooks_removed():
    model = _mlp()
    err = ValueError("user's own error")
    with pytest.raises(ValueError) as info:
        with torchtriage.watch(model, report=False):
            model(torch.randn(2, 4))
            raise err
    assert info.value is err  # the autouse fixture checks that no hook is left


def test_nested_watch_joins_the_outer_session():
    a, b = _mlp(), _mlp()
    with torchtriage.watch(a, report=False, checks=[]) as outer:
        with torchtriage.watch(b, checks=[]) as inner:
            assert inner is outer
        assert torchtriage.current_session() is outer
        assert [type(m) for m in outer.models] == [nn.Sequential, nn.Sequential]
    assert torchtriage.current_session() is None


def test_module_names_follow_named_modules():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2)))
    with torchtriage.watch(model, checks=[], report=False) as s:
        assert s.module_name(model[1][0]) == "1.0"
        assert s.module_name(model) == ""


class _Broken(Checker):
    name = "broken"

    def on_root_forward(self, model, label, args, kwargs, output):
        raise KeyError("bookkeeping bug")


def test_internal_error_warns_once_and_never_breaks_the_step():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(torchtriage.TriageInternalWarning, match=r"broken.on_root_forward.*bookkeeping bug"):
        with torchtriage.watch(model, opt, checks=[_Broken()], report=False):
            losses = _train(model, opt, steps=3)
    assert len(losses) == 3


class _Emitter(Checker):
    name = "emitter"

    def on_root_forward(self, model, label, args, kwargs, output):
        self.session.add(Finding(Category.NUMERICAL, "test.emit", "something is off", stage=Stage.FORWARD))


def test_policy_raise_warn_record_and_dedup():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(torchtriage.AnomalyError, match="something is off"):
        with torchtriage.watch(model, opt, checks=[_Emitter()], on_anomaly="raise", report=False):
            _train(model, opt, steps=1)
    with pytest.warns(torchtriage.TriageWarning, match="something is off"):
        with torchtriage.watch(model, opt, checks=[_Emitter()], on_anomaly="warn", report=False):
            _train(model, opt, steps=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torchtriage.watch(model, opt, checks=[_Emitter()], on_anomaly="record", report=False) as s:
            _train(model, opt, steps=3)
    (f,) = s.report.findings
    assert (f.code, f.step, f.count, f.severity) == ("test.emit", 0, 3, Severity.ERROR)


def test_bad_options_name_what_is_accepted():
    with pytest.raises(torchtriage.ConfigError,
                       match=r"on_anomaly='explode' is not valid; accepted: 'warn', 'raise', 'skip_step', 'record'"):
        torchtriage.watch(_mlp(), on_anomaly="explode")
    with pytest.raises(torchtriage.ConfigError, match=r"unknown check 'nope'; accepted: triage"):
        torchtriage.watch(_mlp(), checks=["nope"])
    with pytest.raises(TypeError, match="models must be a Module or a list of them, got str"):
        torchtriage.watch("model")


def test_report_orders_by_priority_then_execution_and_infos_never_primary():
    fs = [
        Finding("gradient", "g", "grad", order=1),
        Finding("shape", "s", "shape", order=3),
        Finding("dtype", "d", "frozen", severity="info", order=0),
    ]
    r = torchtriage.Report(fs)
    assert [f.code for f in r.findings] == ["s", "g", "d"]
    assert r.primary.code == "s"
    assert torchtriage.Report([fs[2]]).primary is None
    assert torchtriage.Report().to_dict()["primary"] is None


def test_discover_mode_names_models_by_variable_and_skips_loss_modules():
    model = _mlp()
    criterion = nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder()
    with torchtriage.Session(discover=True, checks=[rec], report=False) as s:
        loss = criterion(model(torch.randn(4, 4)), torch.randn(4, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert list(s.report.meta["models"]) == ["model"]
    assert s.optimizers == [opt] and s.step == 1
    assert ("root", "model", Stage.LOSS) in rec.events


def test_without_an_optimizer_backward_calls_are_the_clock():
    model = _mlp()
    rec = Recorder()
    with torchtriage.watch(model, checks=[rec], report=False) as s:
        for _ in range(3):
            model(torch.randn(2, 4)).sum().backward()
    assert s.step == 3 and s.report.meta["steps"] == 3
    assert [e for e in rec.events if e[0] == "end"] == [("end", 0), ("end", 1), ("end", 2)]


def test_checkpoint_recompute_in_backward_is_not_a_new_forward():
    from torch.utils.checkpoint import checkpoint

    block = nn.Sequential(nn.Linear(4, 4), nn.Tanh())

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block, self.head = block, nn.Linear(4, 1)

        def forward(self, x):
            return self.head(checkpoint(self.block, x, use_reentrant=False))

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder()
    with torchtriage.watch(model, opt, checks=[rec], report=False) as s:
        _train(model, opt, steps=2)
    assert [e[0] for e in rec.events].count("root") == 2 and s.step == 2
    assert ("backward", Stage.BACKWARD) in rec.events


class LossRecorder(Checker):
    name = "loss_recorder"

    def __init__(self):
        super().__init__()
        self.calls = []

    def on_loss(self, call):
        self.calls.append((call.name, call.module))


def test_a_loss_call_is_observed_once_even_under_a_torch_function_mode():
    """A TorchFunctionMode (the gradient check's tracer, or the user's own) re-dispatches F.<loss>
    to the session's wrapper from inside the first call: the checks see one call, not two."""
    from torch.overrides import TorchFunctionMode

    class PassThrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    model = nn.Linear(4, 3)
    rec = LossRecorder()
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    with torchtriage.watch(model, checks=[rec], on_anomaly="record", report=False):
        with PassThrough():
            nn.CrossEntropyLoss()(model(x), y).backward()
            torch.nn.functional.cross_entropy(model(x), y).backward()
    assert rec.calls == [("cross_entropy", "CrossEntropyLoss"), ("cross_entropy", None)]


def test_an_nn_loss_module_finding_is_reported_once_with_its_module():
    model = nn.Sequential(nn.Linear(4, 3), nn.Softmax(dim=1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    crit = nn.CrossEntropyLoss()
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(2):
            loss = crit(model(torch.randn(8, 4)), torch.randint(0, 3, (8,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    (f,) = [f for f in s.report.findings if f.code == "silent.probabilities_to_cross_entropy"]
    # the module is the one that made the probabilities (the nn.Softmax), not the loss module
    assert (f.module, f.step, f.count, f.stage) == ("1", 0, 2, Stage.LOSS)
    assert f.evidence["made_by"] == "softmax (1)"


def test_a_gan_counts_one_step_per_iteration():
    G, D = nn.Linear(2, 4), nn.Linear(4, 1)
    og, od = torch.optim.SGD(G.parameters(), lr=0.01), torch.optim.SGD(D.parameters(), lr=0.01)
    with torchtriage.watch([G, D], [od, og], checks=[], report=False) as s:
        for _ in range(3):
            fake = G(torch.randn(8, 2))
            od.zero_grad()
            (D(torch.randn(8, 4)).mean() - D(fake.detach()).mean()).backward()
            od.step()
            og.zero_grad()
            D(fake).mean().backward()
            og.step()
    assert s.step == 3 and s.report.meta["steps"] == 3


def test_global_module_hooks_narrow_to_the_roots_once_no_check_needs_them():
    from torch.nn.modules import module as m

    class LogFeatures(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.head = nn.Linear(4, 4), nn.Linear(4, 1)

        def forward(self, x):
            return self.head(self.fc(torch.log(x + 2)))  # NaN once an input is below -2

    model = LogFeatures()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        # the gradient check screens its first step without them (it wants them back only when
        # the screen saw something: tests/test_gradients_screen.py)
        assert len(m._global_forward_pre_hooks) == 0 and len(model._forward_pre_hooks) == 1
        for i in range(8):
            x = torch.rand(8, 4) - (5.0 if i == 6 else 0.0)  # step 6, after the gradient window
            loss = nn.functional.mse_loss(model(x), torch.randn(8, 1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i == 4:
                assert len(m._global_forward_pre_hooks) == 0 and len(model._forward_pre_hooks) == 1
                assert not model.fc._forward_pre_hooks  # submodules run at full speed
    assert not model._forward_pre_hooks and not model._forward_hooks  # removed on exit
    f = s.report.primary
    assert (f.code, f.step, f.module, f.op) == ("numerical.nonfinite_forward", 6, "", "aten::log")


def test_discovering_sessions_narrow_after_discovery_and_widen_for_a_new_optimizer():
    from torch.nn.modules import module as m

    with torchtriage.Session(discover=True, on_anomaly="record", report=False) as s:
        model = _mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        _train(model, opt, steps=5)
        assert len(m._global_forward_pre_hooks) == 0 and len(model._forward_pre_hooks) == 1
        head = nn.Linear(1, 1)  # a second model, built later with its own optimizer
        opt2 = torch.optim.SGD(head.parameters(), lr=0.1)
        assert len(m._global_forward_pre_hooks) == 1  # discovering again
        loss = head(model(torch.randn(4, 4))).sum()
        opt.zero_grad()
        opt2.zero_grad()
        loss.backward()
        opt2.step()
        opt.step()
        assert len(m._global_forward_pre_hooks) == 0
    assert list(s.report.meta["models"]) == ["model", "head"]
    assert not model._forward_pre_hooks and not head._forward_pre_hooks


def test_a_check_that_chooses_its_steps_gets_only_those_steps_events():
    """`Checker.wants_step`: a check sitting a step out receives none of its events; the
    lifecycle events still arrive, and an exception inside a skipped step still reaches it."""
    from torchtriage._checker import Checker

    class EveryThird(Checker):
        name = "every_third"

        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[str, int]] = []
            self.lifecycle: list[str] = []

        def wants_step(self, step: int) -> bool:
            return step % 3 == 0

        def on_step_begin(self, step: int) -> None:
            self.seen.append(("begin", step))

        def on_backward(self, roots, grads) -> None:
            self.seen.append(("backward", self.session.step))

        def on_optimizer_step_pre(self, optimizer) -> None:
            self.seen.append(("update", self.session.step))

        def on_step_end(self, step: int) -> None:
            self.seen.append(("end", step))

        def on_exception(self, exc) -> None:
            self.lifecycle.append(type(exc).__name__)

        def on_end(self) -> None:
            self.lifecycle.append("end")

    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    check = EveryThird()
    with pytest.raises(KeyError):
        with torchtriage.watch(model, opt, checks=[check], report=False):
            for _ in range(5):
                model(torch.randn(4, 2)).sum().backward()
                opt.step()
                opt.zero_grad()
            model(torch.randn(4, 2))  # step 5: sat out, and it raises
            raise KeyError("user")
    assert check.seen == [("begin", 0), ("backward", 0), ("update", 0), ("end", 0),
                          ("begin", 3), ("backward", 3), ("update", 3), ("end", 3)]
    assert check.lifecycle == ["KeyError", "end"]


def test_a_warning_the_users_filters_make_an_error_reaches_them_as_that_warning():
    """`-W error` (or `simplefilter("error")`) with on_anomaly="warn": the finding's
    TriageWarning is raised at the user's call, as the filter asks; it is not mistaken for a
    bug of torchtriage's (TriageInternalWarning), and the check is not switched off."""
    from torchtriage import TriageInternalWarning, TriageWarning

    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TriageWarning, match="NaN before the model runs") as caught:
            with torchtriage.watch(model, opt, on_anomaly="warn", report=False) as s:
                for i in range(3):
                    x = torch.randn(4, 3)
                    if i == 1:
                        x[0, 0] = float("nan")
                    model(x).sum().backward()
                    opt.step()
                    opt.zero_grad()
    assert not isinstance(caught.value, TriageInternalWarning)
    assert [f.code for f in s.findings] == ["numerical.nonfinite_data"]
    assert s.findings[0].step == 1
