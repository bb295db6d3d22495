"""Samples that mix across the batch, found from a pointwise loss's leading axis (`mse_loss`,
`binary_cross_entropy_with_logits`, `smooth_l1_loss`) when no DataLoader gives the batch size."""

from __future__ import annotations

import pytest

import torchtriage
from _lines import line_in
from torchtriage import Severity
from zoo import batchmix_pointwise as z

ZOO = z.__file__


def _line(text: str) -> int:
    return line_in(ZOO, text, unique=True)


def _watch(make, *args):
    model, opt, train = make(*args)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        out = train()
    return s, out


def _mixed(report):
    return report.filter(code="silent.samples_mixed")


@pytest.mark.parametrize("make, n, module, op, marker", [
    (z.loop_tabular_tokens, 24, "encoder.layers.0.self_attn", "multi_head_attention_forward", "# BUG: tokens"),
    (z.loop_review_lstm, 16, "rnn", "lstm", "# BUG: (batch, words, d)"),
    (z.loop_patch_keypoints, 8, "attn", "multi_head_attention_forward", "# BUG: (batch, patches, d)"),
])
def test_found_from_the_pointwise_loss_leading_axis(make, n, module, op, marker):
    s, _ = _watch(make, True)
    found = _mixed(s.report)
    assert len(found) == 1, [(f.code, f.message) for f in s.report.findings]
    f = found[0]
    assert (f.severity, f.step, f.module, f.op, f.line) == (Severity.WARNING, 0, module, op, _line(marker))
    ev = f.evidence
    assert (ev["batch_size"], ev["batch_size_from"]) == (n, "the loss's sample axis")
    assert ev["other_samples_changed"] == f"{n - 1}/{n - 1}" and ev["max_change_other_samples"] > 0
    assert ev["batch_axis_there"] == 0 and ev["batch_first"] is False


@pytest.mark.parametrize("make", [z.loop_tabular_tokens, z.loop_review_lstm, z.loop_patch_keypoints])
def test_fixed_twins_are_quiet_and_the_numbers_unchanged(make):
    s, watched = _watch(make, False)
    assert not _mixed(s.report)
    _, _, train = make(False)
    assert watched == train()  # bitwise: the same losses


@pytest.mark.parametrize("make", [z.loop_tabular_tokens, z.loop_review_lstm])
def test_the_buggy_runs_numbers_are_unchanged(make):
    _, watched = _watch(make, True)
    _, _, train = make(True)
    assert watched == train()


@pytest.mark.parametrize("make", [z.loop_time_major_mse, z.loop_deep_set, z.loop_bn_autoencoder, z.loop_graph_nodes,
                                  z.loop_dense_gcn])
def test_correct_look_alikes_are_quiet(make):
    s, _ = _watch(make)
    assert not _mixed(s.report), [f.message for f in _mixed(s.report)]


def test_the_probe_ran_on_the_look_alikes(monkeypatch):
    from torchtriage._dynamics import _mixwatch

    ran = []
    real = _mixwatch.start_probe
    monkeypatch.setattr(_mixwatch, "start_probe", lambda *a: ran.append(a[3:5]) or real(*a))
    for make in (z.loop_time_major_mse, z.loop_deep_set, z.loop_bn_autoencoder):
        _watch(make)
    assert ran == [(12, "loss"), (12, "loss"), (16, "loss")]
