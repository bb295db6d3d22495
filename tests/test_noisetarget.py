"""Rows of a loss target overwritten in place with random noise
(`silent.target_overwritten_with_noise`, `_silent/_noisetarget.py`)."""

from __future__ import annotations

import pytest

from _lines import line_in, run_watched
from torchtriage import Severity
from zoo import noisetarget as z

ZOO = z.__file__
CODE = "silent.target_overwritten_with_noise"


def _line(text: str) -> int:
    return line_in(ZOO, text, unique=True)


_run = run_watched


def test_condition_dropout_that_overwrites_the_clean_target_is_found():
    report = _run(z.condition_dropout, True)
    found = report.filter(code=CODE)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    f = found[0]
    assert (f.severity, f.line, f.op) == (Severity.WARNING, _line("# the overwrite"), "randn_like")
    ev = f.evidence
    assert ev["rows"] == 16 and 1 <= ev["rows_overwritten"] < 16
    assert ev["target_shape"] == [16, 128]
    assert f.message.endswith("the model is trained to output noise")


def test_a_boolean_row_mask_with_the_arguments_swapped_is_found():
    report = _run(z.masked_rows, True)
    f = report.filter(code=CODE)[0]
    assert (f.evidence["rows_overwritten"], f.op) == (6, "randn")


@pytest.mark.parametrize("make", [z.condition_dropout, z.masked_rows])
def test_a_corrupted_copy_is_quiet(make):
    assert not _run(make, False).filter(code=CODE)


def test_a_diffusion_noise_target_is_quiet():
    assert not _run(z.diffusion_noise_target).filter(code=CODE)
