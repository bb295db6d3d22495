"""The framework callbacks in a real distributed job (issue 18 §4): two gloo ranks on CPU under
`python -m torch.distributed.run`, the Lightning / HF callback instead of `torchtriage run`. One
report for the job, merged on rank 0 and printed and written there only (the framework's rank
zero), the same findings `torchtriage run` gives (tests/test_distributed.py): the rank that made
the NaN gets the diagnosis, the other an info that it received it through the all-reduce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from _torchrun import torchrun

ZOO = Path(__file__).resolve().parent / "zoo" / "distributed"

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")


def _run(tmp_path, script, *args):
    out = tmp_path / "report.json"
    res = torchrun([str(ZOO / script), *args, str(out)], cwd=tmp_path, timeout=240,
                   env={"TORCHTRIAGE_RUN_DIR": str(tmp_path / "run")})
    assert res.returncode == 0, res.stderr[-3000:]
    assert not (tmp_path / "run").exists(), "the run directory is left behind"
    assert res.stderr.count("== torchtriage report ==") == 1  # rank 0 only
    assert "TriageInternalWarning" not in res.stderr
    report = json.loads(out.read_text())
    assert report["meta"]["world_size"] == 2
    assert {r: v["ended"] for r, v in report["meta"]["ranks"].items()} == {"0": "ok", "1": "ok"}
    [received] = [f for f in report["findings"] if f["code"] == "distributed.nonfinite_received"]
    assert (received["rank"], received["step"], received["evidence"]["origin rank"]) == (0, 2, 1)
    assert [f["code"] for f in report["findings"] if f["rank"] == 0 and f["severity"] != "info"] == []
    return report["findings"][report["primary"]], res


def test_hf_callback_under_torchrun_merges_the_ranks_reports_on_rank_zero(tmp_path):
    pytest.importorskip("transformers")
    primary, res = _run(tmp_path, "hf_trainer_callback_nan.py", str(tmp_path / "out"))
    assert (primary["code"], primary["severity"], primary["rank"], primary["step"], primary["stage"]) == (
        "numerical.nonfinite_data", "error", 1, 2, "data")
    assert primary["evidence"]["input"]["nan"] == 1 and primary["evidence"]["where"] == "[1]['x']"
    script = ZOO / "hf_trainer_callback_nan.py"
    line = script.read_text().splitlines().index("    trainer.train()") + 1
    assert (primary["file"], primary["line"]) == (str(script), line)  # the user's line: the Trainer holds the model


def test_lightning_callback_under_torchrun_merges_the_ranks_reports_on_rank_zero(tmp_path):
    pytest.importorskip("lightning")
    primary, _ = _run(tmp_path, "lightning_callback_nan.py")
    # as under `torchrun -m torchtriage run`: Lightning's DDP forward is not replayed by one rank
    assert (primary["code"], primary["rank"], primary["step"], primary["stage"]) == (
        "distributed.nonfinite_sharded", 1, 2, "forward")
