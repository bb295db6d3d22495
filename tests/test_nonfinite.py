"""The non-finite sentinel: exact findings for each way a value turns NaN/Inf, and silence otherwise."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from tests.zoo import nonfinite as zoo

import torchtriage
from torchtriage import Severity, Stage

LOG_LINE = "return torch.log(x)  # BUG: log(0) for the zeros the ReLU made"


def _watch(model, opt=None, **kw):
    kw.setdefault("on_anomaly", "record")
    return torchtriage.watch(model, opt, checks=["nonfinite"], report=False, **kw)


def _errors(s):
    return [f for f in s.report.findings if f.severity is not Severity.INFO]


def _mse_steps(model, opt, xs, ys):
    losses = []
    for x, y in zip(xs, ys):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


def test_nan_born_in_a_forward_op_deep_inside_a_submodule():
    model = zoo.LogOfReluDeepInside()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with _watch(model, opt) as s:
        _mse_steps(model, opt, [torch.randn(16, 4)] * 3, [torch.randn(16, 1)] * 3)
    (f,) = _errors(s)
    assert (f.code, f.stage, f.step, f.module, f.op) == ("numerical.nonfinite_forward", Stage.FORWARD, 0,
                                                        "block.1.1", "aten::log")
    assert f.file.endswith("zoo/nonfinite.py") and f.evidence["source_line"] == LOG_LINE
    assert f.message == "-Inf first produced by aten::log in module block.1.1 during the forward pass (step 0)"
    assert f.evidence["zeros in input"] > 0 and "clamp" in f.next_check
    assert f.count == 3  # later steps are the same NaN, propagated: counted, not replayed


def test_nan_only_in_backward_is_traced_to_the_forward_op_and_module():
    model = zoo.SqrtAtZeroInBackward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with _watch(model, opt) as s:
        _mse_steps(model, opt, [torch.randn(8, 4)], [torch.randn(8, 1)])
    (f,) = _errors(s)
    assert (f.code, f.stage, f.step, f.module, f.op) == ("numerical.nonfinite_backward", Stage.BACKWARD, 0,
                                                        "dist", "aten::sqrt")
    assert f.evidence["source_line"] == ("return torch.sqrt(((a - b) ** 2).sum(-1, keepdim=True))"
                                         "  # BUG: no eps, distance 0")
    assert f.evidence["backward node"] == "SqrtBackward0" and f.evidence["zeros in saved result"] == 8
    assert f.message.startswith("The forward pass is finite but the gradient is not: "
                                "the backward of aten::sqrt in module dist")


def test_inf_in_the_loss_from_log_of_zero():
    model = zoo.ProbabilityNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    with _watch(model, opt) as s:
        loss = F.nll_loss(torch.log(model(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert not torch.isfinite(loss)
    (f,) = _errors(s)
    assert (f.code, f.stage, f.step, f.op) == ("numerical.nonfinite_loss", Stage.LOSS, 0, "aten::log")
    assert f.message == "The loss is +Inf although the model outputs are finite; first produced by aten::log (step 0)"
    assert f.evidence["zeros in input"] > 0 and f.evidence["source_line"] == "loss = F.nll_loss(torch.log(model(x)), y)"


def test_optimizer_step_with_a_huge_learning_rate_makes_parameters_non_finite():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e38)
    with _watch(model, opt) as s:
        _mse_steps(model, opt, [torch.randn(8, 4)] * 2, [torch.randn(8, 1) * 10] * 2)
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step) == ("numerical.nonfinite_update", Stage.OPTIMIZER, 0)
    assert f.parameter in {n for n, _ in model.named_parameters()}
    assert f.evidence["lr"] == 1e38 and "Lower the learning rate" in f.next_check
    assert f.message.startswith(f"The optimizer update made parameter {f.parameter} non-finite (SGD, step 0)")


def test_float16_overflow_explains_the_dtype_range():
    model = zoo.HalfPrecisionOverflow().half()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.full((4, 4), 3.0, dtype=torch.float16)
    with _watch(model, opt) as s:
        _mse_steps(model, opt, [x], [torch.zeros(4, 1, dtype=torch.float16)])
    f = _errors(s)[0]
    assert (f.stage, f.module, f.op) == (Stage.FORWARD, "energy", "aten::pow")
    assert f.evidence["float16 max"] == 65504.0
    assert "range of float16 (largest finite value 65504)" in f.cause and "bfloat16" in f.next_check


def test_intentional_minus_inf_mask_is_quiet_but_a_fully_masked_row_is_a_finding():
    torch.manual_seed(0)
    model = zoo.MaskedAttention()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(2, 5, 8), torch.randn(2, 1)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    with _watch(model, opt) as s:
        for _ in range(3):
            loss = F.mse_loss(model(x, mask), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert s.report.findings == ()
    mask[0] = False  # a padding-only row: every key masked
    with _watch(model, opt) as s:
        loss = F.mse_loss(model(x, mask), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    (f,) = _errors(s)
    assert (f.code, f.stage, f.module, f.op) == ("numerical.fully_masked_row", Stage.FORWARD, "attn", "aten::_softmax")
    assert f.evidence["fully masked rows"] == 5 and f.evidence["source_line"] == "return torch.softmax(scores, dim=-1)"


def test_gradscaler_skipped_step_is_at_most_info():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 127, backoff_factor=2.0 ** -110)
    with _watch(model, opt) as s:
        for _ in range(3):
            loss = F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1) * 100)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    assert s.report.primary is None
    (f,) = s.report.findings
    assert (f.code, f.severity, f.step) == ("numerical.amp_skipped_step", Severity.INFO, 0)
    assert s.step == 3 and all(0 < v < 1e5 for v in s.series["loss"][1:])


def test_skip_step_keeps_parameters_and_state_bitwise_unchanged():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    _mse_steps(model, opt, [torch.randn(8, 4)], [torch.randn(8, 1)])
    before = [p.detach().clone() for p in model.parameters()]
    state = [v.clone() for st in opt.state.values() for v in st.values()]
    bad_y = torch.full((8, 1), float("nan"))
    with _watch(model, opt, on_anomaly="skip_step") as s:
        _mse_steps(model, opt, [torch.randn(8, 4)], [bad_y])
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(state, [v for st in opt.state.values() for v in st.values()]))
    assert all(p.grad is not None for p in model.parameters())  # grads handed back after the step
    assert _errors(s)[0].stage is Stage.LOSS


class _DropoutNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 16)
        self.drop = nn.Dropout(0.5)
        self.bn = nn.BatchNorm1d(16)
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        h = self.bn(self.drop(self.fc(x)))
        return self.head(torch.sqrt(h.abs() + x.sum(-1, keepdim=True) * 0))


def _loop(model, opt, steps, bad_at):
    g = torch.Generator().manual_seed(3)
    out = []
    for i in range(steps):
        x = torch.randn(8, 4, generator=g)
        if i == bad_at:
            x[0, 0] = float("-inf")  # sum*0 → NaN inside the model at this step only
        loss = F.mse_loss(model(x), torch.randn(8, 1, generator=g))
        opt.zero_grad()
        loss.backward()
        if torch.isfinite(loss):
            opt.step()
        out.append(loss.detach().clone())
    return out


def test_losses_and_parameters_bitwise_identical_over_50_steps_even_after_a_replay():
    torch.manual_seed(1)
    m1 = _DropoutNet()
    m2 = _DropoutNet()
    m2.load_state_dict(m1.state_dict())
    o1, o2 = torch.optim.Adam(m1.parameters(), lr=1e-2), torch.optim.Adam(m2.parameters(), lr=1e-2)
    torch.manual_seed(7)
    base = _loop(m1, o1, 50, bad_at=10)
    torch.manual_seed(7)
    with _watch(m2, o2) as s:
        watched = _loop(m2, o2, 50, bad_at=10)
    same = lambda a, b: torch.equal(a.nan_to_num(1.0), b.nan_to_num(1.0))  # noqa: E731
    assert all(same(a, b) for a, b in zip(base, watched))
    assert all(same(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    assert torch.equal(torch.get_rng_state(), torch.get_rng_state())
    f = _errors(s)[0]
    # the batch's -inf (no mask: it never meets a softmax) turns NaN in dropout's mul: data is first
    assert (f.code, f.stage, f.step) == ("numerical.nonfinite_data", Stage.DATA, 10)
    assert f.evidence["became NaN at"] == "aten::mul in drop" and f.evidence["input"].neginf == 1
    # step 10 never reached opt.step(), so the session (clocked by optimizer steps) merged it with 11
    assert len(s.series["loss"]) == 49 and len(s.series["grad_norm"]) == 49


def test_clean_models_have_no_finding_and_odd_outputs_are_fine():
    for model in (zoo.RichOutputs(), zoo.CheckpointedMLP()):
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        with _watch(model, opt) as s:
            for _ in range(3):
                out = model(torch.randn(8, 4))
                out = out[0] if isinstance(out, tuple) else out
                loss = F.mse_loss(out, torch.randn(8, 1))
                opt.zero_grad()
                loss.backward()
                opt.step()
        assert s.report.findings == ()
        assert len(s.series["grad_norm"]) == 3


def test_nan_in_the_batch_is_a_data_finding():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 3)
    x[2, 1] = float("nan")
    with _watch(model, opt) as s:
        _mse_steps(model, opt, [x], [torch.randn(4, 1)])
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step) == ("numerical.nonfinite_data", Stage.DATA, 0)
    assert f.evidence["input"].nan == 1 and f.evidence["where"] == "[0][0]"


def test_raise_policy_stops_at_the_first_non_finite_value():
    model = zoo.LogOfReluDeepInside()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(torchtriage.AnomalyError, match=r"aten::log in module block\.1\.1"):
        with _watch(model, opt, on_anomaly="raise"):
            _mse_steps(model, opt, [torch.randn(16, 4)], [torch.randn(16, 1)])


def test_demo_script_names_stage_module_op_and_line():
    from tests.conftest import EXAMPLES, run_cli

    r = run_cli("run", str(EXAMPLES / "nan_in_forward.py"))
    assert r.returncode == 0
    assert "where: step=0  stage=forward  module=encoder.2  op=aten::log" in r.stderr
    assert "nan_in_forward.py:9    return torch.log(x)" in r.stderr
    assert "zeros in input:" in r.stderr


@pytest.mark.filterwarnings("ignore::UserWarning")  # dynamo traces the session hooks and warns
def test_compiled_model_is_replayed_eagerly_with_the_user_module_path():
    model = zoo.LogOfReluDeepInside()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model, backend="eager")
    with _watch(compiled, opt) as s:
        _mse_steps(compiled, opt, [torch.randn(16, 4)], [torch.randn(16, 1)])
    f = s.report.primary
    assert (f.stage, f.module, f.op, f.evidence["source_line"]) == (Stage.FORWARD, "block.1.1", "aten::log", LOG_LINE)


def test_finite_but_huge_parameters_overflow_in_the_forward_not_in_the_update():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e38)
    with _watch(model, opt) as s:
        _mse_steps(model, opt, [torch.randn(32, 4)] * 3, [torch.randn(32, 1) * 10] * 3)
    (f,) = _errors(s)
    assert (f.stage, f.step, f.module, f.op) == (Stage.FORWARD, 1, "2", "aten::addmm")
    assert "exceeds the range of float32" in f.cause and "learning rate" in f.next_check


def test_gradscaler_scale_that_keeps_collapsing_is_a_warning():
    model = zoo.SqrtAtZeroInBackward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    with _watch(model, opt) as s:
        for _ in range(12):
            loss = F.mse_loss(model(torch.randn(4, 4)), torch.randn(4, 1))
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    (f,) = _errors(s)
    assert (f.code, f.severity, f.step) == ("numerical.amp_scale_collapse", Severity.WARNING, 9)
    assert f.message == "GradScaler keeps skipping steps: 10 skipped in a row, loss scale down to 128.0 (step 9)"


def test_a_nan_batch_whose_update_was_applied_makes_later_trips_its_consequence():
    # one corrupt record at step 2; the optimizer applies its NaN gradient, so every later step
    # trips on NaN parameters: that is the batch's consequence, not a parameter edited elsewhere
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torchtriage.watch(model, opt, checks=["nonfinite"], on_anomaly="record", report=False) as s:
        for step in range(5):
            x, y = torch.randn(16, 4), torch.randn(16, 1)
            if step == 2:
                x[3, 1] = float("nan")
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    [f] = [g for g in s.report if g.severity is Severity.ERROR]
    assert (f.code, f.stage, f.step, f.count) == ("numerical.nonfinite_data", Stage.DATA, 2, 3)


def test_a_localized_step_leaves_no_reference_cycle_holding_the_users_tensors():
    # the op tracer kept the frame that started the replay, whose locals hold the tracer: a cycle
    # that kept the failing step's tensors and graph alive until the cycle collector ran
    import gc
    import weakref

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gc.collect()
    gc.disable()
    try:
        with torchtriage.watch(model, opt, checks=["nonfinite"], on_anomaly="record", report=False) as s:
            x, y = torch.randn(16, 4), torch.randn(16, 1)
            loss = torch.log(model(x) - y).mean()  # log of negatives: NaN in the loss
            kept = weakref.ref(loss)
            opt.zero_grad()
            loss.backward()
            opt.step()
            del loss
            for _ in range(2):  # later steps open and release the recorded step
                opt.zero_grad()
                ((model(x) - y) ** 2).mean().backward()
                opt.step()
        assert [f.code for f in s.report if f.severity is Severity.ERROR][:1] == ["numerical.nonfinite_loss"]
        assert kept() is None
    finally:
        gc.enable()
