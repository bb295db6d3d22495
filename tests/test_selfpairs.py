"""A contrastive loss whose positive pairs are each an embedding with itself
(`silent.contrastive_self_pairs`, `_silent/_selfpairs.py`)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchtriage
from _lines import line_in
from torchtriage import Severity, Stage
from zoo import selfpairs as z

ZOO = z.__file__
CODE = "silent.contrastive_self_pairs"


def _line(text: str) -> int:
    return line_in(ZOO, text, unique=True)


def _watch(make, *args):
    model, opt, train = make(*args)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        out = train()
    return s, out


def _found(report):
    return report.filter(code=CODE)


def test_ntxent_on_the_same_view_twice_is_found():
    s, _ = _watch(z.loop_text_ntxent, True)
    found = _found(s.report)
    assert len(found) == 1, [(f.code, f.line) for f in s.report.findings]
    f = found[0]
    assert (f.severity, f.stage, f.step, f.op) == (Severity.WARNING, Stage.LOSS, 0, "cross_entropy")
    ev = f.evidence
    assert (ev["logits"], ev["positives_in"], ev["product"], ev["A"], ev["B"]) == (
        [32, 32], "columns 0..31", "A @ B.T", [32, 16], [32, 16])
    assert (ev["identical_positive_pairs"], ev["max_abs_diff_positive_pairs"]) == ("32/32", 0.0)
    assert ev["positive_is_row_max"] == "32/32"
    assert f.message.startswith("the positive pair of each of 32 rows of this contrastive loss is an embedding "
                                "with itself: both vectors of every labelled pair are identical")
    assert "slice taken twice" in f.cause


def test_moco_whose_key_encodes_the_querys_view_is_found_at_the_first_step():
    # the key encoder is a copy of the query encoder at step 0: the same view gives the same rows
    s, _ = _watch(z.loop_vision_moco, True)
    f = _found(s.report)[0]
    assert (f.step, f.evidence["product"], f.evidence["positives_in"]) == (0, "(q * k).sum(1)", "column 0")
    assert f.evidence["identical_positive_pairs"] == "8/8"


def test_infonce_over_the_anchor_rows_names_the_line_that_made_them_again():
    s, _ = _watch(z.loop_tabular_infonce, True)
    f = _found(s.report)[0]
    assert f.line == _line("# BUG: the anchor's rows again")
    assert (f.evidence["identical_positive_pairs"], f.evidence["same_storage"]) == ("20/20", False)


def test_a_slice_taken_twice_names_the_second_slice():
    torch.manual_seed(0)
    enc = torch.nn.Linear(6, 4)
    opt = torch.optim.SGD(enc.parameters(), lr=0.1)
    views = torch.randn(20, 6)  # [view 1 rows; view 2 rows]
    with torchtriage.watch(enc, opt, on_anomaly="record", report=False) as s:
        for _ in range(2):
            emb = enc(views)
            a = emb[:10]
            b = emb[:10]  # the second view's rows are emb[10:]
            loss = F.cross_entropy(F.normalize(a, dim=1) @ F.normalize(b, dim=1).t() / 0.1, torch.arange(10))
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = _found(s.report)
    assert len(found) == 1
    f = found[0]
    assert f.evidence["both_views_are"] == "rows 0:10 of one (20, 4) tensor, sliced twice"
    import inspect
    src, start = inspect.getsourcelines(test_a_slice_taken_twice_names_the_second_slice)
    assert f.line == start + next(i for i, line in enumerate(src) if "b = emb[:10]" in line)


@pytest.mark.parametrize("make", [z.loop_text_ntxent, z.loop_vision_moco, z.loop_tabular_infonce])
def test_fixed_twins_are_quiet_and_numbers_unchanged(make):
    s, watched = _watch(make, False)
    assert not _found(s.report), [f.evidence for f in _found(s.report)]
    _, _, train = make(False)
    assert watched == train()  # bitwise


@pytest.mark.parametrize("make", [z.loop_text_ntxent, z.loop_vision_moco])
def test_the_buggy_runs_numbers_are_unchanged(make):
    _, watched = _watch(make, True)
    _, _, train = make(True)
    assert watched == train()


@pytest.mark.parametrize("make", [z.loop_clip, z.loop_classifier_without_bias, z.loop_few_rows_unchanged, z.loop_byol])
def test_correct_look_alikes_are_quiet(make):
    s, _ = _watch(make)
    assert not _found(s.report), [f.evidence for f in _found(s.report)]
