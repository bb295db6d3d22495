"""`accelerate launch` works like torchrun (issue 18 §4): `accelerate launch ... -m torchtriage run
train.py` runs one session per rank and prints one merged report, the way
`torchrun ... -m torchtriage run train.py` does (tests/test_distributed.py). The script is a loop
written for Accelerate (`Accelerator.prepare`, `accelerator.backward`); Accelerate's own launcher
starts the ranks. Each launch is bounded and leaves no process behind (`_torchrun.launched`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from _torchrun import accelerate_launch

ZOO = Path(__file__).resolve().parent / "zoo" / "distributed"

pytestmark = [
    pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                       reason="torch.distributed with gloo is needed"),
]


def _run(tmp_path, *script_args):
    pytest.importorskip("accelerate")
    out = tmp_path / "report.json"
    res = accelerate_launch(["-m", "torchtriage", "run", "--json", str(out), "--stall-timeout", "60",
                             str(ZOO / "accelerate_loop.py"), *script_args],
                            cwd=tmp_path, timeout=180, env={"TORCHTRIAGE_RUN_DIR": str(tmp_path / "run")})
    assert not (tmp_path / "run").exists(), "the run directory is left behind"
    return res, json.loads(out.read_text())


def test_accelerate_launch_nan_on_one_rank_is_one_merged_report(tmp_path):
    res, report = _run(tmp_path)
    assert res.returncode == 0, res.stderr
    assert "trained on 2 processes" in res.stdout  # Accelerate saw two ranks (gloo), not two lone processes
    assert res.stderr.count("== torchtriage report ==") == 1  # printed once, by rank 0
    assert report["meta"]["world_size"] == 2
    assert {r: v["ended"] for r, v in report["meta"]["ranks"].items()} == {"0": "ok", "1": "ok"}
    primary = report["findings"][report["primary"]]
    assert (primary["code"], primary["severity"], primary["rank"], primary["step"], primary["stage"]) == (
        "numerical.nonfinite_data", "error", 1, 2, "data")
    assert primary["evidence"]["input"]["nan"] == 1
    [received] = [f for f in report["findings"] if f["code"] == "distributed.nonfinite_received"]
    assert (received["severity"], received["rank"], received["step"], received["evidence"]["origin rank"]) == (
        "info", 0, 2, 1)
    assert [f["code"] for f in report["findings"] if f["rank"] == 0 and f["severity"] != "info"] == []
    assert "TriageInternalWarning" not in res.stderr


def test_accelerate_launch_correct_loop_stays_quiet(tmp_path):
    res, report = _run(tmp_path, "clean")
    assert res.returncode == 0, res.stderr
    assert "trained on 2 processes" in res.stdout
    assert report["meta"]["world_size"] == 2
    assert report["findings"] == []
    assert res.stderr.count("No finding") == 1
    assert "TriageInternalWarning" not in res.stderr


def test_a_launcher_that_started_one_process_is_not_read_as_a_tensor_rank_fault(tmp_path, monkeypatch):
    """`accelerate launch --cpu --num_processes 2` without an MPI host file starts one process, with
    no RANK: init_process_group's "environment variable RANK expected" was read as `shape.rank`."""
    import torch.distributed as dist

    import torchtriage

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="environment variable RANK expected, but not set"):
        with torchtriage.watch(report=False) as session:
            dist.init_process_group("gloo")
    [finding] = session.report.findings
    assert (finding.code, finding.category.value, finding.op) == (
        "other.exception", "other", "torch.distributed.init_process_group")
    assert "environment variable RANK expected, but not set" in finding.evidence["exception"]
