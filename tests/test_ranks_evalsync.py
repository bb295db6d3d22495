"""A sharded evaluation pass whose metric no collective combines (issue 26, session 8): each rank
evaluates its DistributedSampler shard and keeps its own number. Two gloo ranks under torchrun;
the same passes with an all_reduce, an all_gather_object and a whole-set loader stay quiet."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _lines import marked
from _torchrun import triaged

ZOO = Path(__file__).resolve().parent / "zoo" / "evalsync"
SCRIPT = "sharded_eval.py"

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")


line_of = marked(ZOO / SCRIPT)


def run(tmp_path, mode):
    report = triaged(ZOO / SCRIPT, mode, cwd=tmp_path)
    return [f for f in report["findings"] if f["code"] == "distributed.eval_not_reduced"]


def test_metrics_left_per_rank_between_epochs_and_after_training(tmp_path):
    found = sorted(run(tmp_path, "local"), key=lambda f: f["line"])
    assert [(f["severity"], f["line"], f["category"]) for f in found] == [
        ("warning", line_of("VAL"), "distributed"), ("warning", line_of("TEST"), "distributed")]
    val, test = (f["evidence"] for f in found)
    assert (val["samples_this_rank"], val["evaluation_set"], val["share_of_set"]) == (32, 64, 0.5)
    assert (test["samples_this_rank"], test["evaluation_set"], test["world_size"]) == (24, 48, 2)
    assert val["ranks"] == [0, 1] and val["reducing_collectives_after_pass"] == 0


def test_reduced_gathered_and_whole_set_evaluations_are_quiet(tmp_path):
    assert run(tmp_path, "quiet") == []


def test_a_shard_that_changes_each_pass_is_info(tmp_path):
    """A shuffled DistributedSampler with set_epoch: each pass measures a new random half, and over
    the passes most of the set reached this rank's metric (the harm rule of data.eval_lost)."""
    [f] = run(tmp_path, "rotating")
    assert (f["severity"], f["line"]) == ("info", line_of("VAL"))
    ev = f["evidence"]
    assert (ev["samples_this_rank"], ev["evaluation_set"], ev["passes"]) == (32, 64, 4)
    assert ev["never_evaluated"] < 32
