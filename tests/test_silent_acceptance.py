"""Acceptance cases for the silent checks: where an exp near overflow was written, no duplicate of
the sentinel's finding, a NaN batch is not a target leak, causal / padding probes on nn.TransformerEncoder."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity, Stage
from zoo import silent as z


def _run(model, loop, checks=("silent",)):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False, checks=list(checks)) as s:
        loop(model, opt)
    return s.report


def _forward_softmax_loop(model, opt):
    for _ in range(3):
        p = model(torch.randn(8, 6))
        loss = -torch.log(p[:, 0]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_exp_near_overflow_in_the_forward_names_the_line_and_module():
    torch.manual_seed(0)
    (f,) = _run(z.HandWrittenSoftmaxNearOverflow(), _forward_softmax_loop).findings
    assert (f.code, f.severity, f.stage, f.step, f.module, f.op) == ("silent.exp_overflow", Severity.WARNING,
                                                                     Stage.FORWARD, 0, "", "exp")
    assert f.file == z.__file__ and f.evidence["source_line"] == "e = torch.exp(s)"


def test_exp_near_overflow_in_the_loss_code_names_the_line():
    (f,) = _run(nn.Linear(6, 4), z.hand_softmax_in_the_loss).findings
    assert (f.code, f.severity, f.stage, f.step, f.module) == ("silent.exp_overflow", Severity.WARNING,
                                                               Stage.LOSS, 0, None)
    assert f.evidence["source_line"] == "e = torch.exp(scores)  # BUG: 75 + log(4) is 12 below float32's exp limit"
    assert f.message.startswith("exp input reaches 7") and f.message.endswith("below the overflow limit 88.72")


def test_an_exp_that_already_overflowed_is_the_sentinels_finding_only():
    def loop(model, opt):
        p = model(torch.randn(8, 6) * 40)
        loss = -torch.log(p[:, 0]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    torch.manual_seed(0)
    model = z.HandWrittenSoftmaxNearOverflow()
    with torch.no_grad():
        model.lin.weight.mul_(50)
    report = _run(model, loop, checks=("silent", "nonfinite"))
    assert [f.code for f in report.findings if f.severity is not Severity.INFO] == ["numerical.nonfinite_forward"]
    assert report.primary.op == "aten::exp"


def test_a_nan_in_the_batch_is_not_a_target_leak():
    def loop(model, opt):
        x = torch.randn(16, 4)
        x[0, 0] = float("nan")
        loss = F.mse_loss(model(x), torch.randn(16, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    assert _run(nn.Linear(4, 1), loop).findings == ()


@pytest.fixture
def padded_ids():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 20, (2, 8), generator=g)
    mask = torch.ones(2, 8, dtype=torch.long)
    ids[0, 6:], mask[0, 6:] = 0, 0
    return ids, mask


def test_check_causal_on_a_transformer_encoder(padded_ids):
    ids, _ = padded_ids
    torch.manual_seed(0)
    assert not torchtriage.check_causal(z.EncoderLM(causal=True).eval(), ids)
    (f,) = torchtriage.check_causal(z.EncoderLM(causal=False).eval(), ids).findings
    assert (f.code, f.severity, f.evidence["first_changed_position"]) == ("silent.attention_sees_future",
                                                                          Severity.ERROR, 0)
    assert f.message == ("outputs at position 0 changed when only tokens from position "
                         f"{f.evidence['perturbed_from']} on changed: the model sees the future")


def test_check_padding_on_a_bidirectional_transformer_encoder(padded_ids):
    ids, mask = padded_ids
    torch.manual_seed(0)
    assert not torchtriage.check_padding(z.EncoderLM(causal=False).eval(), ids, 0, mask)
    (f,) = torchtriage.check_padding(z.EncoderLM(causal=False, use_pad=False).eval(), ids, 0, mask).findings
    assert (f.code, f.evidence["pad_positions"], f.evidence["first_changed"]) == (
        "silent.padding_leaks", 2, {"row": 0, "position": 0})
    assert f.message == ("outputs at real tokens changed when only PAD (0) positions changed: "
                         "padding leaks into the model")
    # causal attention with right padding: real tokens never attend to later PAD positions
    assert not torchtriage.check_padding(z.EncoderLM(causal=True, use_pad=False).eval(), ids, 0, mask)
