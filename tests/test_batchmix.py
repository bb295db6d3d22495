"""Samples of a batch that mix in the forward pass (`silent.samples_mixed`): the automatic probe
(`_silent/_batchmix.py`, run by the dynamics check through `_dynamics/_mixwatch.py`)."""

from __future__ import annotations

import pytest
import torch

import torchtriage
from _lines import line_in
from torchtriage import Severity, Stage
from zoo import batchmix as z

ZOO = z.__file__


def _line(text: str) -> int:
    return line_in(ZOO, text, unique=True)


def _watch(make, *args):
    model, opt, train = make(*args)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        out = train()
    assert torch._C._len_torch_function_stack() == 0
    return s, out


def _mixed(report):
    return report.filter(code="silent.samples_mixed")


def _one(report):
    found = _mixed(report)
    assert len(found) == 1, [(f.code, f.step) for f in report.findings]
    return found[0]


# ---------------------------------------------------------------------------- bugs, each written differently
def test_second_gru_without_batch_first_found_with_the_loaders_batch_size():
    s, _ = _watch(z.loop_gru_activity, True)
    f = _one(s.report)
    assert (f.severity, f.stage, f.step, f.module, f.op) == (Severity.WARNING, Stage.FORWARD, 0, "refine", "gru")
    assert (f.file, f.line) == (ZOO, _line("# BUG: refine reads"))
    ev = f.evidence
    assert (ev["batch_size"], ev["batch_size_from"]) == (12, "DataLoader sampler indices")
    assert ev["other_samples_changed"] == "11/11" and ev["max_change_other_samples"] > 1e-3
    assert (ev["mixes_at"], ev["input_there"], ev["batch_axis_there"], ev["batch_first"]) == (
        "gru (refine)", [12, 20, 16], 0, False)
    assert f.message == ("the outputs of 11 of the other 11 samples of a batch changed when only sample 0 changed: "
                         "the samples mix first at gru (refine), which was given [12, 20, 16], batch axis 0")
    assert "batch_first" in f.cause and "permute" in f.next_check


def test_lstm_forecaster_fed_batch_major_found_in_a_function_trainer():
    s, _ = _watch(z.loop_lstm_forecast, True)
    f = _one(s.report)
    assert (f.severity, f.module, f.op, f.line) == (Severity.WARNING, "lstm", "lstm", _line("# BUG: (batch, time, 1)"))
    assert f.evidence["batch_size"] == 16 and f.evidence["other_samples_changed"] == "15/15"
    assert f.evidence["batch_first"] is False


def test_transformer_encoder_without_batch_first_found_from_the_loss_sample_axis():
    # hand-fed slices, no DataLoader: the batch size is cross_entropy's N
    s, _ = _watch(z.loop_transformer_classifier, True)
    f = _one(s.report)
    assert f.severity == Severity.WARNING and f.line == _line("# BUG: (batch, seq, d)")
    assert f.module.startswith("encoder.layers.0")
    assert (f.evidence["batch_size"], f.evidence["batch_size_from"]) == (10, "the loss's sample axis")
    assert f.evidence["other_samples_changed"] == "9/9"


def test_view_where_permute_was_meant_names_the_view_line():
    s, _ = _watch(z.loop_view_for_permute, True)
    f = _one(s.report)
    assert (f.severity, f.op, f.module, f.line) == (Severity.WARNING, "view", "", _line("# BUG: view where permute"))
    assert (f.evidence["input_there"], f.evidence["batch_axis_there"]) == ([16, 9, 8], 0)


# ---------------------------------------------------------------------------- fixed twins and look-alikes
@pytest.mark.parametrize("make", [z.loop_gru_activity, z.loop_lstm_forecast, z.loop_transformer_classifier,
                                  z.loop_view_for_permute])
def test_fixed_twins_are_quiet(make):
    s, _ = _watch(make, False)
    assert not _mixed(s.report)


@pytest.mark.parametrize("make, args", [
    (z.loop_time_major_tagger, ()),  # a time-major GRU fed (T, B, F), the loss reading (B, C, T)
    (z.loop_seq_first_transformer, ()),  # a sequence-first encoder fed (T, B, E)
    (z.loop_batchnorm_cnn, (True,)),  # BatchNorm: running statistics in eval
    (z.loop_batchnorm_cnn, (False,)),  # BatchNorm without running statistics: the batch's, by design
    (z.loop_two_tower, ()),  # CLIP-style B x B logits: an output with two batch axes is not compared
    (z.loop_full_batch_gnn, ()),  # nodes linked by edge_index: not independent samples
    (z.loop_gan_minibatch_std, ()),  # a critic's minibatch-stddev feature, trained on all-ones targets
    (z.loop_momentum_queue, ()),  # (its targets are all 0: no per-sample prediction)
])
def test_correct_look_alikes_are_quiet(make, args):
    s, _ = _watch(make, *args)
    assert not _mixed(s.report), [f.message for f in _mixed(s.report)]


def test_support_set_of_a_few_shot_episode_is_context_not_a_warning():
    # 25 support and 25 query samples: both carry the loss's N; the queries alone mix nothing
    s, _ = _watch(z.loop_protonet)
    f = _one(s.report)
    assert f.severity == Severity.INFO and f.evidence["only_through_input"] == 1


def test_the_probe_ran_on_the_look_alikes(monkeypatch):
    # quiet because the probe judged them, not because it never ran
    from torchtriage._dynamics import _mixwatch

    ran = []
    real = _mixwatch.start_probe
    monkeypatch.setattr(_mixwatch, "start_probe", lambda *a: ran.append(a[3:5]) or real(*a))
    _watch(z.loop_time_major_tagger)
    _watch(z.loop_seq_first_transformer)
    _watch(z.loop_batchnorm_cnn, False)
    _watch(z.loop_momentum_queue)
    assert ran == [(8, "loss"), (8, "loss"), (8, "loader"), (6, "loader")]


# ---------------------------------------------------------------------------- the run's numbers
@pytest.mark.parametrize("bug", [True, False])
def test_numbers_attributes_buffers_and_rng_unchanged(bug):
    # the model keeps its hidden state as an attribute, counts calls in a buffer and samples
    # noise in forward: the probe's calls leave all of it, and the RNG, as the run left them
    model, _, train = z.loop_stateful(bug)
    plain = train()
    after = (torch.rand(3), [p.detach().clone() for p in model.parameters()], model.calls.clone(),
             model.last_h.clone())

    model2, opt2, train2 = z.loop_stateful(bug)
    with torchtriage.watch(model2, opt2, on_anomaly="record", report=False) as s:
        watched = train2()
    assert watched == plain  # bitwise: the same losses
    assert torch.equal(torch.rand(3), after[0])
    assert all(torch.equal(a, b) for a, b in zip(after[1], model2.parameters()))
    assert torch.equal(model2.calls, after[2]) and torch.equal(model2.last_h, after[3])
    assert len(_mixed(s.report)) == int(bug)


def test_momentum_encoder_updated_inside_forward_is_quiet_and_unchanged():
    model, _, train = z.loop_momentum_queue()
    plain = train()
    after = [t.detach().clone() for t in (*model.parameters(), *model.buffers())]
    model2, opt2, train2 = z.loop_momentum_queue()
    with torchtriage.watch(model2, opt2, on_anomaly="record", report=False) as s:
        watched = train2()
    assert watched == plain
    assert all(torch.equal(a, b) for a, b in zip(after, (*model2.parameters(), *model2.buffers())))
    assert not _mixed(s.report)


def test_a_loss_axis_that_is_not_the_models_batch_axis_is_not_judged():
    # A time-major GRU fed (T=7, B=5, F): told the batch has 7 samples (a loss reading (T, ...)
    # first), the probe sees the "samples" mix; but axis 1 keeps its slices apart: not judged.
    from torchtriage._silent._batchmix import probe_mixing

    torch.manual_seed(0)
    gru = torch.nn.GRU(3, 4)
    x = torch.randn(7, 5, 3)
    assert probe_mixing(gru, (x,), {}, 7, "loss", None) is None
    f = probe_mixing(gru, (x,), {}, 7, "loader", None)  # a loader's count is the batch, by construction
    assert f is not None
    assert (f.code, f.op, f.evidence["other_samples_changed"]) == ("silent.samples_mixed", "gru", "6/6")
    assert probe_mixing(gru, (x,), {}, 5, "loss", None) is None  # the real batch axis: independent
