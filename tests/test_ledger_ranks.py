"""The step ledger's ranks (issue 26): DDP replicas stay identical, a hand-written gradient sync
averages, a fully_shard parameter gets a gradient. Two gloo ranks under torchrun, bounded in
time, no process or run directory left behind; the correct twins stay quiet."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _lines import line_in
from _torchrun import triaged

ZOO = Path(__file__).resolve().parent / "zoo" / "step_ranks"

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")

OURS = ("distributed.ranks_drift", "distributed.grad_summed", "gradient.sharded_no_grad")


def line_of(script: str, marker: str) -> int:
    return line_in(ZOO / script, f"# {marker}", ending=True)


def run(tmp_path, script, mode):
    report = triaged(ZOO / script, mode, cwd=tmp_path)
    assert "step_ranks" not in report["meta"]
    return [f for f in report["findings"] if f["code"] in OURS]


def test_a_model_cast_after_ddp_wrapping_drifts_and_the_cast_is_named(tmp_path):
    [f] = run(tmp_path, "ddp_replicas.py", "cast")
    assert (f["code"], f["severity"], f["step"]) == ("distributed.ranks_drift", "error", 3)
    assert f["line"] == line_of("ddp_replicas.py", "CAST")
    ev = f["evidence"]
    assert ev["first_step_differing"] == 3 and ev["ranks"] == [0, 1] and ev["steps_compared_before"] == 3
    assert "0.weight" in ev["parameters_differing"]
    assert "rank 0: 0.weight: float32 on cpu -> float64 on cpu (seen at step 3)" in ev["changed_after_wrapping"]


def test_calls_that_bypass_the_ddp_wrapper_drift_and_the_call_is_named(tmp_path):
    [f] = run(tmp_path, "ddp_replicas.py", "bypass")
    assert (f["code"], f["severity"], f["step"]) == ("distributed.ranks_drift", "error", 2)
    assert f["line"] == line_of("ddp_replicas.py", "BYPASS")
    bypass = f["evidence"]["bypassed_wrapper"]
    assert bypass["rank 0"]["step"] == bypass["rank 1"]["step"] == 2 and bypass["rank 0"]["calls"] == 6


def test_a_gradient_all_reduce_that_sums_without_dividing(tmp_path):
    [f] = run(tmp_path, "ddp_replicas.py", "summed")
    assert (f["code"], f["severity"], f["step"]) == ("distributed.grad_summed", "warning", 0)
    ev = f["evidence"]
    assert ev["world_size"] == 2 and "0.weight" in ev["parameters"]
    assert ev["synced_over_ranks_mean"][0] == pytest.approx(2.0, rel=1e-3)


@pytest.mark.parametrize("mode", ["clean", "averaged"])
def test_correct_ddp_and_an_averaged_hand_written_sync_are_quiet(tmp_path, mode):
    assert run(tmp_path, "ddp_replicas.py", mode) == []


def test_a_fully_shard_parameter_that_never_gets_a_gradient(tmp_path):
    [f] = run(tmp_path, "fsdp_unused.py", "unused")
    assert (f["code"], f["severity"]) == ("gradient.sharded_no_grad", "warning")
    ev = f["evidence"]
    assert ev["parameters"] == ["extra.weight", "extra.bias"] and ev["judged_optimizer_steps"] == 5
    assert ev["ranks"] == [0, 1]


def test_a_correct_fully_shard_loop_is_quiet(tmp_path):
    assert run(tmp_path, "fsdp_unused.py", "clean") == []
