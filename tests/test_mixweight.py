"""A CutMix label weight that is not the share of pixels the sample kept
(`silent.mix_weight_not_pixel_share`, `_silent/_mixweight.py`)."""

from __future__ import annotations

import pytest

from _lines import line_in, run_watched
from torchtriage import Severity, Stage
from zoo import mixweight as z

ZOO = z.__file__
CODE = "silent.mix_weight_not_pixel_share"


def _line(text: str) -> int:
    return line_in(ZOO, text, unique=True)


_run = run_watched


def test_a_clipped_box_with_the_sampled_lambda_is_found():
    report = _run(z.cutmix_indexed, True)
    found = report.filter(code=CODE)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    f = found[0]
    assert (f.severity, f.stage, f.line) == (Severity.WARNING, Stage.LOSS, _line("# the mixed loss"))
    ev = f.evidence
    assert ev["own_label_known"] is True
    assert ev["paste_line"] == _line("# the paste")
    assert abs(ev["label_weight_own"] + ev["label_weight_other"] - 1) < 1e-6
    assert ev["gap"] == pytest.approx(abs(ev["label_weight_own"] - ev["pixel_share_kept"]), abs=1e-3)
    assert ev["gap"] >= 0.1
    assert "does not match the pixel ratio" in f.message


def test_a_corner_box_from_the_flipped_batch_is_found():
    report = _run(z.cutmix_flipped_batch, True)
    f = report.filter(code=CODE)[0]
    ev = f.evidence
    assert (ev["box"], ev["label_weight_own"], ev["pixel_share_kept"]) == ([7, 7], 0.5, 0.8775)


@pytest.mark.parametrize("make", [z.cutmix_indexed, z.cutmix_flipped_batch])
def test_lambda_recomputed_from_the_box_is_quiet(make):
    report = _run(make, False)
    assert not report.filter(code=CODE)


def test_mixup_is_quiet():
    assert not _run(z.mixup).filter(code=CODE)


def test_a_mixing_branch_first_taken_after_the_warm_up_is_found_on_a_later_step():
    report = _run(z.cutmix_after_warmup)
    found = report.filter(code=CODE)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    f = found[0]
    assert f.step == 5 and f.line == _line("# mixed late")
    assert (f.evidence["box"], f.evidence["label_weight_own"], f.evidence["pixel_share_kept"]) == ([6, 6], 0.3, 0.91)
