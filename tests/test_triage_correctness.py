"""The triage's correctness on real errors, labelled by hand (issue 27 §4).

`tests/data/triage_labelled.py` holds ≥ 150 snippets that really call torch the wrong way, each
with the category (and, where sure, the code) a person gives it. All run in one process; the
share the triage gets right must stay at or above the floor measured when the labels were
written, and the failure message lists every case it gets wrong. The layout faults the issue
names (a write through an expanded, stride-0 tensor; overlapping input and output) are asserted
one by one with the message, the evidence and what to do.
"""

from __future__ import annotations

import collections
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import torchtriage
from _lines import line_in
from torchtriage import Category

_SPEC = importlib.util.spec_from_file_location("triage_labelled", Path(__file__).parent / "data" / "triage_labelled.py")
assert _SPEC is not None and _SPEC.loader is not None
labelled = sys.modules.setdefault("triage_labelled", importlib.util.module_from_spec(_SPEC))
_SPEC.loader.exec_module(labelled)

# Measured on torch 2.13: 213 / 251 of the first cases before the issue 27 fixes, 247 / 247 after;
# 49 / 53 of the held-out cases written afterwards, before their own fixes; 300 / 300 now. A
# little room for messages that change between torch releases.
FLOOR = 0.95


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    # torch's default (distribution argument validation on): the first `torch.compile` of the
    # process (another test in this worker) turns it off for good, and the distribution snippets
    # rely on the error it raises
    from torch.distributions import Distribution

    before = Distribution._validate_args
    Distribution.set_default_validate_args(True)
    try:
        return labelled.run_all(str(tmp_path_factory.mktemp("labelled")))
    finally:
        Distribution.set_default_validate_args(before)


def test_corpus_is_large_and_spread():
    cases = labelled.CASES
    assert len(cases) >= 150
    assert len({c.id for c in cases}) == len(cases)
    per = collections.Counter(cat for c in cases for cat in c.categories)
    for category in ("shape", "dtype", "device", "layout", "numerical", "gradient", "data", "other"):
        assert per[category] >= 1, category
    assert per["layout"] >= 10 and per["gradient"] >= 20 and per["dtype"] >= 20


def test_every_snippet_raises(outcomes):
    silent = [o.case.id for o in outcomes if not o.raised]
    assert not silent, f"these snippets no longer raise on torch {torch.__version__}: {silent}"


def test_share_classified_correctly(outcomes):
    wrong = [o for o in outcomes if not o.correct]
    share = 1 - len(wrong) / len(outcomes)
    listing = "\n".join(f"  {o.case.id}: expected {o.case.category}/{o.case.code or '*'}, "
                        f"got {o.category}/{o.code} ({o.raised[:120]})" for o in wrong)
    assert share >= FLOOR, f"correct {len(outcomes) - len(wrong)}/{len(outcomes)} ({share:.1%}):\n{listing}"


def test_inside_modules_and_the_autograd_engine_are_covered(outcomes):
    """Errors raised inside nn modules' forward and inside backward are part of the corpus."""
    ids = {o.case.id for o in outcomes}
    assert {"linear_in_features", "conv_channels_gray", "lstm_input_size", "sigmoid_output_modified",
            "custom_function_grad_count", "anomaly_nan_backward"} <= ids


# ---------------------------------------------------------------------- layout, one by one
def _triage(fn):
    try:
        fn()
    except Exception as exc:  # the user's error, whatever its type
        return torchtriage.triage_exception(exc).primary
    raise AssertionError("did not raise")


def _line(fn, marker="# BUG"):
    return line_in(fn, marker)


def test_expanded_tensor_written_in_place_is_layout():
    def step():
        scale = torch.zeros(4, 1).expand(4, 4)
        scale.mul_(2)  # BUG

    f = _triage(step)
    assert f.category is Category.LAYOUT and f.code == "layout.internal_overlap"
    assert f.message == ("scale is written in place, but several of its elements share one memory location "
                         "(shape [4, 4], stride [1, 0]: stride 0 on dim 1, an expanded tensor)")
    assert f.cause.startswith("it is an expanded tensor: expand() / broadcast_to() give stride 0")
    assert "not an element count" in f.cause
    assert f.next_check == ("write to a real copy: scale.clone() (or .contiguous()) before the in-place op, "
                            "or use the out-of-place op (y = x.add(1)) at your line")
    assert f.line == _line(step) and f.file == __file__


def test_memory_overlap_message_unnamed_chain():
    def step():
        torch.randn(3).expand(3, 3).add_(1)  # BUG

    f = _triage(step)
    assert "more than one element of the written-to tensor refers to a single memory location" in \
        f.evidence["exception"]
    assert f.category is Category.LAYOUT and f.code == "layout.internal_overlap"
    assert f.message.startswith("torch.randn(3).expand(3, 3) is written in place")
    assert "torch.randn(3).expand(3, 3).clone() (or .contiguous())" in f.next_check
    assert f.line == _line(step)


def test_expanded_out_argument_is_named():
    def step():
        out = torch.zeros(3).expand(3, 3)
        torch.add(torch.randn(3, 3), 1, out=out)  # BUG

    f = _triage(step)
    assert f.code == "layout.internal_overlap"
    assert f.message.startswith("out is written in place")
    assert "stride [0, 1]: stride 0 on dim 0, an expanded tensor" in f.message


def test_broadcast_to_written_in_place():
    """Another user's names and another op: a broadcast_to() mask clamped in place."""
    def step():
        weights = torch.rand(1, 8).broadcast_to(5, 8)
        weights.clamp_(min=0.1)  # BUG

    f = _triage(step)
    assert f.category is Category.LAYOUT and f.code == "layout.internal_overlap"
    assert f.message == ("weights is written in place, but several of its elements share one memory location "
                         "(shape [5, 8], stride [0, 1]: stride 0 on dim 0, an expanded tensor)")
    assert "weights.clone()" in f.next_check


def test_partial_overlap_of_input_and_output():
    def step():
        x = torch.randn(5)
        x[1:].copy_(x[:-1])  # BUG

    f = _triage(step)
    assert f.category is Category.LAYOUT and f.code == "layout.partial_overlap"
    assert f.next_check.startswith("clone the input first")


def test_element_count_errors_stay_shape():
    """The overlap rule reads its own messages only: a real element-count fault is still shape."""
    f = _triage(lambda: torch.randn(3).item())
    assert f.category is Category.SHAPE


def test_overlap_in_chinese():
    from torchtriage._catalogue import get_language, set_language

    def step():
        scale = torch.zeros(4, 1).expand(4, 4)
        scale.mul_(2)

    before = get_language()
    set_language("zh")
    try:
        f = _triage(step)
    finally:
        set_language(before)
    assert f.message == ("scale 被原地写入，但它的多个元素共用同一块内存"
                         "（形状 [4, 4]，步长 [1, 0]：维度 1 上步长为 0，是 expand 出来的张量）")


def test_scheduler_values_are_the_schedule_and_its_argument_the_optimizer(outcomes):
    """A scheduler stepped past its total steps, or built with a value it refuses, is a fault of
    the schedule against the loop (`other.scheduler_config`); a scheduler given a model where the
    optimizer belongs stays an optimizer fault. Both are raised inside torch/optim/lr_scheduler.py."""
    got = {o.case.id: (o.category, o.code) for o in outcomes}
    assert got["onecycle_stepped_past_total"] == ("other", "other.scheduler_config")
    assert got["cyclic_bad_mode"] == ("other", "other.scheduler_config")
    assert got["scheduler_not_optimizer"][0] == "gradient"
