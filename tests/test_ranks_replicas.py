"""Every model an optimizer steps stays one model across the ranks (issue 26 item 3, session 8):
a model never wrapped, a second network beside the DDP one, a DDP wrapper called through
`.module` from its first call. Models per rank on purpose (different at the first step),
periodic averaging and a hand-written averaged sync stay quiet. Two gloo ranks under torchrun."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _lines import marked
from _torchrun import triaged

ZOO = Path(__file__).resolve().parent / "zoo" / "step_ranks"
SCRIPT = "replicas_unsynced.py"

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")

OURS = ("distributed.ranks_drift", "distributed.replicas_drift", "distributed.grad_summed")


line_of = marked(ZOO / SCRIPT)


def run(tmp_path, mode):
    report = triaged(ZOO / SCRIPT, mode, cwd=tmp_path)
    return [f for f in report["findings"] if f["code"] in OURS]


def test_a_model_never_wrapped_drifts_and_its_step_is_named(tmp_path):
    [f] = run(tmp_path, "unwrapped")
    assert (f["code"], f["severity"], f["step"]) == ("distributed.replicas_drift", "warning", 1)
    assert f["line"] == line_of("STEP") and f["category"] == "distributed"
    ev = f["evidence"]
    assert ev["identical_before_first_step"] is True and ev["ranks"] == [0, 1]
    assert ev["parameters"] == 4 and ev["count"] >= 3 and "0.weight" in ev["parameters_differing_at_last_step"]
    assert ev["last_step_compared"] == 7 and ev["largest_relative_difference_of_parameter_norms"] > 1e-4


def test_a_second_model_beside_the_ddp_one_drifts(tmp_path):
    [f] = run(tmp_path, "second")
    assert (f["code"], f["line"]) == ("distributed.replicas_drift", line_of("VALUE_STEP"))
    assert f["evidence"]["parameters"] == 4  # the value net's, not the policy's (DDP keeps those equal)


def test_a_ddp_wrapper_called_through_module_from_its_first_call(tmp_path):
    [f] = run(tmp_path, "unwrap_call")
    assert (f["code"], f["severity"]) == ("distributed.ranks_drift", "error")
    assert f["line"] == line_of("CALL")
    assert f["evidence"]["bypassed_wrapper"]["rank 1"]["calls"] == 8


def test_models_per_rank_periodic_averaging_and_a_synced_loop_are_quiet(tmp_path):
    assert run(tmp_path, "quiet") == []
