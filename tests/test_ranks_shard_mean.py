"""A DistributedSampler shard's sum divided by the whole set (`_ledger/_denominator.py`, session 9):
two gloo ranks under torchrun; the fixed loop (divided by the rank's own count, the shard changing
each epoch) raises no alarm."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _torchrun import triaged

ZOO = Path(__file__).resolve().parent / "zoo" / "evalsync"
SCRIPT = "shard_mean.py"

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")


def run(tmp_path, mode):
    report = triaged(ZOO / SCRIPT, mode, cwd=tmp_path)
    return report["findings"]


def test_a_shard_divided_by_the_whole_set(tmp_path):
    lines = (ZOO / SCRIPT).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith("# HERE"))
    [f] = [f for f in run(tmp_path, "bug") if f["code"] == "distributed.shard_mean_denominator"]
    assert (f["severity"], f["line"], f["category"]) == ("warning", line, "distributed")
    ev = f["evidence"]
    assert (ev["denominator"], ev["denominator_value"], ev["pass_samples"], ev["factor"], ev["world_size"]) == \
        ("len(loader.dataset)", 64, 32, 0.5, 2)


def test_a_shard_divided_by_its_own_count_is_quiet(tmp_path):
    found = run(tmp_path, "fixed")
    assert [(f["code"], f["severity"]) for f in found if f["severity"] in ("warning", "error")] == []
