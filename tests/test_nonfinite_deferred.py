"""The sentinel's steady state: after the warm-up the batch and the model outputs are not summed
at the forward but kept, and normed with the gradients at the step's one read (`_flags`).
Every finding stays what the per-boundary sums found, on steps past the warm-up too, and the
cases a norm cannot tell apart (-Inf masks, huge finite values, outputs written in place after
the forward) stay quiet or caught as before, at one read a step."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from tests._syncs import SyncCounter
from torch.distributions import Categorical

import torchtriage
from torchtriage import Severity, Stage
from torchtriage._nonfinite._flags import WARMUP_STEPS

BAD = WARMUP_STEPS + 3  # a step read with kept (not summed) batch and outputs


def _watch(model, opt, **kw):
    return torchtriage.watch(model, opt, checks=["nonfinite"], on_anomaly="record", report=False, **kw)


def _errors(s):
    return [f for f in s.report.findings if f.severity is not Severity.INFO]


class SqrtNet(nn.Module):
    """Its output is NaN where `x[:, 0]` is negative (sqrt of a negative), finite elsewhere."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) + torch.sqrt(x[:, :1])  # NaN for a negative first feature


def _batches(steps, bad_at=None, bad=None):
    g = torch.Generator().manual_seed(0)
    for i in range(steps):
        x = torch.rand(8, 4, generator=g)
        if i == bad_at:
            bad(x)
        yield x, torch.rand(8, 4, generator=g)


def _train(model, opt, batches, after_forward=None, loss_fn=F.mse_loss):
    reads = []
    counter = SyncCounter()
    with counter:
        for x, y in batches:
            n0 = len(counter.calls)
            out = model(x)
            if after_forward is not None:
                out = after_forward(out)
            loss = loss_fn(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            reads.append(len(counter.calls) - n0)
    return reads


def _put(i, j, value):
    def write(x):
        x[i, j] = value
    return write


def test_a_nan_batch_past_the_warmup_is_a_data_finding_at_its_step():
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with _watch(model, opt) as s:
        reads = _train(model, opt, _batches(BAD + 2, BAD, _put(2, 3, float("nan"))))
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step) == ("numerical.nonfinite_data", Stage.DATA, BAD)
    assert f.evidence["input"].nan == 1 and f.evidence["where"] == "[0][0]"
    assert reads[:BAD] == [1] * BAD  # one read a step before it


def test_a_nan_output_past_the_warmup_is_localized_to_its_op():
    torch.manual_seed(0)
    model = SqrtNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with _watch(model, opt) as s:
        _train(model, opt, _batches(BAD + 1, BAD, _put(1, 0, -1.0)))
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step, f.op) == ("numerical.nonfinite_forward", Stage.FORWARD, BAD, "aten::sqrt")


class MaskedHead(nn.Module):
    """Logits with -Inf at masked classes from step `start` on: a mask, not a fault."""

    def __init__(self, start):
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.start, self.calls = start, 0

    def forward(self, x):
        out = self.fc(x)
        if self.calls >= self.start:
            out = out.masked_fill(torch.arange(6) >= 4, float("-inf"))
        self.calls += 1
        return out


def _ce(out, y):
    return F.cross_entropy(out, y[:, 0].mul(4).long().clamp(max=3))


def test_minus_inf_masked_outputs_are_quiet_and_read_once_a_step():
    """-Inf in every step's outputs: seen in the eager warm-up, so no step reads twice."""
    torch.manual_seed(0)
    model = MaskedHead(start=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with _watch(model, opt) as s:
        reads = _train(model, opt, _batches(BAD + 2), loss_fn=_ce)
    assert s.report.findings == ()
    assert reads == [1] * (BAD + 2) and len(s.series["loss"]) == BAD + 2


def test_a_mask_that_first_shows_past_the_warmup_costs_one_more_read_once():
    """The kept output's norm reads +Inf: its sum decides (a -Inf: no trip), on that step only."""
    torch.manual_seed(0)
    model = MaskedHead(start=BAD)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with _watch(model, opt) as s:
        reads = _train(model, opt, _batches(BAD + 3), loss_fn=_ce)
    assert s.report.findings == ()
    assert reads == [1] * BAD + [2] + [1, 1]


def test_finite_outputs_whose_squares_overflow_are_no_finding():
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with _watch(model, opt) as s:
        # 1e20: the output's L2 norm overflows float32, its sum does not
        reads = _train(model, opt, _batches(BAD + 2), after_forward=lambda out: out * 0 + 1e20,
                       loss_fn=lambda out, y: (out * 1e-20 - y).square().mean())
    assert s.report.findings == ()
    assert reads[BAD:] == [1, 1] and len(s.series["grad_norm"]) == BAD + 2


def test_outputs_written_in_place_after_the_forward_are_still_checked_as_the_model_made_them():
    """The loop overwrites the model's NaN in place before the loss (so the loss stays finite):
    the warm-up sees the outputs written since the forward, and every later step sums them at
    the forward, as before."""
    torch.manual_seed(0)
    model = SqrtNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def clean(out):
        return out.masked_fill_(out.isnan(), 0.0)  # in place, after the forward

    with _watch(model, opt) as s:
        _train(model, opt, _batches(BAD + 1, BAD, _put(1, 0, -1.0)), after_forward=clean)
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step, f.op) == ("numerical.nonfinite_forward", Stage.FORWARD, BAD, "aten::sqrt")


def test_hand_written_loss_past_the_warmup_is_localized_from_the_kept_loss_graph():
    """Past the warm-up the step is not taped: the loss region is re-evaluated from the saved
    tensors kept at backward."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Sigmoid())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def loss_fn(out, y):
        return -(y * torch.log(out - y.ge(1.0) * out)).mean()  # log(0) where a target is 1

    batches = list(_batches(BAD + 1))
    batches[BAD][1][0, 0] = 1.0
    with _watch(model, opt) as s:
        _train(model, opt, batches, loss_fn=loss_fn)
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step, f.op) == ("numerical.nonfinite_loss", Stage.LOSS, BAD, "aten::log")


def test_a_functional_loss_past_the_warmup_is_replayed_from_its_recorded_call():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.LogSoftmax(-1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = list(_batches(BAD + 1))
    batches[BAD][1][0, 0] = -0.5  # kl_div's target * log(target): log of a negative
    with _watch(model, opt) as s:
        _train(model, opt, batches, loss_fn=lambda out, y: F.kl_div(out, y, reduction="batchmean"))
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step) == ("numerical.nonfinite_loss", Stage.LOSS, BAD)
    assert f.op in ("aten::log", "aten::xlogy")


class HalfHead(nn.Module):
    """A float32 batch into a bfloat16 layer: the read's norms mix float32 and bfloat16 tensors."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4).to(torch.bfloat16)

    def forward(self, x):
        return self.fc(x.bfloat16()) + torch.sqrt(x[:, :1]).bfloat16()


def test_mixed_precision_batch_and_outputs_are_normed_and_a_nan_found():
    torch.manual_seed(0)
    model = HalfHead()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with _watch(model, opt) as s:
        reads = _train(model, opt, _batches(BAD + 1, BAD, _put(1, 0, -1.0)),
                       loss_fn=lambda out, y: F.mse_loss(out.float(), y))
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step, f.op) == ("numerical.nonfinite_forward", Stage.FORWARD, BAD, "aten::sqrt")
    assert reads[:BAD] == [1] * BAD and len(s.series["grad_norm"]) == BAD + 1


def test_a_step_that_raises_before_its_read_reads_its_kept_flags_then():
    """Past the warm-up a NaN batch, then `Categorical` refusing the NaN logits in the same
    step, before its read: the kept batch and outputs are read when the step raises, and the
    error counts on the batch's finding."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with pytest.raises(ValueError):
        with torchtriage.watch(net, opt, on_anomaly="record", report=False) as s:
            for x, _ in _batches(BAD + 1, BAD, _put(1, 2, float("nan"))):
                logits = net(x)
                Categorical(logits=logits, validate_args=True)
                loss = logits.square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    (f,) = _errors(s)
    assert (f.code, f.step, f.count) == ("numerical.nonfinite_data", BAD, 2)
    assert f.evidence["then raised"].startswith("ValueError: Expected parameter logits")
