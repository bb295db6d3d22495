"""A loss divided by a count summed over every rank and then averaged again by DDP (issue 26,
session 8): each step is 1/world of the global mean's gradient. Two gloo ranks under torchrun;
the loss scaled by the world size, and a hand-summed sync without DDP, stay quiet."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _lines import marked
from _torchrun import triaged

ZOO = Path(__file__).resolve().parent / "zoo" / "step_ranks"
SCRIPT = "global_divisor.py"

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")


line_of = marked(ZOO / SCRIPT)


def run(tmp_path, mode):
    report = triaged(ZOO / SCRIPT, mode, cwd=tmp_path)
    return [f for f in report["findings"] if f["code"] in ("distributed.loss_global_divisor",
                                                           "distributed.grad_summed", "distributed.replicas_drift")]


def test_a_loss_over_the_global_count_averaged_again_by_ddp(tmp_path):
    [f] = run(tmp_path, "ddp")
    assert (f["code"], f["severity"], f["line"], f["step"]) == (
        "distributed.loss_global_divisor", "warning", line_of("GLOBAL_COUNT"), 0)
    ev = f["evidence"]
    assert ev["world_size"] == 2 and ev["constant_factor_on_loss"] == 1.0
    assert ev["gradient_scale_vs_global_mean"] == 0.5 and ev["ranks"] == [0, 1]


def test_the_loss_scaled_by_the_world_size_and_a_summed_sync_are_quiet(tmp_path):
    assert run(tmp_path, "quiet") == []
