"""A sum over the ranks reduced again (`_distributed/_rereduce.py`, session 11): two gloo ranks
under torchrun; one reduction per metric, and AVG / MAX reduced again, raise no alarm."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _torchrun import triaged

ZOO = Path(__file__).resolve().parent / "zoo" / "evalsync"
SCRIPT = "metric_reduced_twice.py"

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")


def run(tmp_path, mode):
    report = triaged(ZOO / SCRIPT, mode, cwd=tmp_path)
    return report["findings"]


def test_one_metric_reduced_three_times(tmp_path):
    lines = (ZOO / SCRIPT).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith("# HERE"))
    [f] = [f for f in run(tmp_path, "bug") if f["code"] == "distributed.reduced_twice"]
    assert (f["severity"], f["line"], f["category"]) == ("warning", line, "distributed")
    ev = f["evidence"]
    assert (ev["reductions"], ev["world_size"], ev["factor"], ev["shape"]) == (3, 2, 4, [])
    assert ev["lines"] == [f"{SCRIPT}:{line - 1}", f"{SCRIPT}:{line}", f"{SCRIPT}:{line + 1}"]
    assert ev["value_reported"] == pytest.approx(4 * ev["value_after_first_reduction"])


@pytest.mark.parametrize("mode", ["fixed", "avg"])
def test_each_metric_reduced_once_or_an_idempotent_reduction_again_is_quiet(tmp_path, mode):
    found = run(tmp_path, mode)
    assert [f["code"] for f in found if f["code"] == "distributed.reduced_twice"] == []


HAND = "hand_sharded_eval.py"


def run_hand(tmp_path, mode):
    report = triaged(ZOO / HAND, mode, cwd=tmp_path)
    return report["findings"]


def test_an_evaluation_set_cut_by_hand_and_reported_by_rank_0(tmp_path):
    lines = (ZOO / HAND).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith("# HERE"))
    [f] = [f for f in run_hand(tmp_path, "bug") if f["code"] == "distributed.eval_not_reduced"]
    assert (f["severity"], f["line"], f["category"]) == ("warning", line, "distributed")
    ev = f["evidence"]
    assert (ev["world_size"], ev["forwards_per_rank"], ev["share_rank0"]) == (2, [4, 4], 0.5)


@pytest.mark.parametrize("mode", ["fixed", "reduced"])
def test_the_whole_set_on_every_rank_or_reduced_parts_are_quiet(tmp_path, mode):
    found = run_hand(tmp_path, mode)
    assert [f["code"] for f in found if f["code"] == "distributed.eval_not_reduced"] == []


STREAM = "hand_sharded_stream.py"


def run_stream(tmp_path, mode):
    return triaged(ZOO / STREAM, mode, cwd=tmp_path)["findings"]


def test_a_stream_cut_by_hand_whose_windows_shift_between_evaluations(tmp_path):
    """Session 12: the evaluation windows start elsewhere at each pass (an iterator keeping its
    offset): the rows they hold are the same set, so the parts are still one set cut by rank."""
    lines = (ZOO / STREAM).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith("# HERE"))
    [f] = [f for f in run_stream(tmp_path, "bug") if f["code"] == "distributed.eval_not_reduced"]
    assert (f["severity"], f["line"], f["category"]) == ("warning", line, "distributed")
    assert f["evidence"]["world_size"] == 2 and f["evidence"]["share_rank0"] == 0.5


def test_a_stream_cut_by_hand_and_reduced_is_quiet(tmp_path):
    found = run_stream(tmp_path, "reduced")
    assert [f["code"] for f in found if f["code"] == "distributed.eval_not_reduced"] == []
