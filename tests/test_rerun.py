"""A non-finite value the run could not localize is localized by a rerun of the script up to
its step, with that step recorded (issue 27): a hand-written loss on one rare batch then a
crash, an RL update from a replay buffer, a masked mean over an empty mask on one rank of a
gloo job, a `torch.distributions` check one step after the NaN. And the repro loop with a
target the script builds before its loop: run --bundle -> replay -> shrink -> make-test."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchtriage
from _lines import line_in
from _torchrun import torchrun

ZOO = Path(__file__).resolve().parent / "zoo" / "rerun"
DIST = Path(__file__).resolve().parent / "zoo" / "distributed"
SRC = str(Path(__file__).resolve().parents[1] / "src")


_line = line_in


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _run(tmp_path, script: Path, *opts: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "report.json"
    res = subprocess.run([sys.executable, "-m", "torchtriage", "run", "--json", str(out), *opts, str(script)],
                         capture_output=True, text=True, timeout=600, env=_env(), cwd=tmp_path)
    return res, json.loads(out.read_text())


def _primary(report: dict) -> dict:
    return report["findings"][report["primary"]]


def _assert_localized(f: dict, code: str, op: str, script: Path, text: str, step: int) -> None:
    assert (f["code"], f["severity"], f["op"], f["step"]) == (code, "error", op, step), f
    assert (Path(f["file"]).name, f["line"]) == (script.name, _line(script, text))
    assert f["evidence"]["localized_by"] == "rerun"
    assert f["evidence"]["replayed by"] == "step_replay"
    assert f["evidence"]["rerun"].startswith(f"the script rerun from the start: {step + 1} step(s) in ")
    assert "why" not in f["evidence"]


def test_hand_written_loss_on_one_rare_batch_at_step_40_then_a_crash(tmp_path):
    script = ZOO / "rare_batch_crash.py"
    res, report = _run(tmp_path, script)
    assert res.returncode == 1 and "RuntimeError: loss diverged at step 40" in res.stderr
    assert "rerunning the script up to that step" in res.stderr
    f = _primary(report)
    _assert_localized(f, "numerical.nonfinite_loss", "aten::div", script, "rel = (pred - y) / y", 40)
    assert f["evidence"]["zeros in divisor"] == 1


def test_without_the_rerun_the_finding_says_why(tmp_path):
    res, report = _run(tmp_path, ZOO / "rare_batch_crash.py", "--no-rerun")
    f = _primary(report)
    assert (f["code"], f["severity"], f["op"], f["step"]) == ("numerical.nonfinite_loss", "warning", None, 40)
    assert f["evidence"]["why"].startswith("the ops outside the models were not recorded at this step")
    assert "rerunning" not in res.stderr


def test_replay_buffer_rl_update(tmp_path):
    script = ZOO / "replay_buffer.py"
    res, report = _run(tmp_path, script)
    assert res.returncode == 0, res.stderr
    f = _primary(report)
    _assert_localized(f, "numerical.nonfinite_loss", "aten::sub", script, "adv = rewards - rewards.mean()", 13)
    assert f["count"] == 10  # the later NaN steps are its consequences, counted on it


def test_distributions_argument_check_one_step_after_the_nan(tmp_path):
    script = ZOO / "distributions_next_step.py"
    res, report = _run(tmp_path, script)
    assert res.returncode == 1 and "ValueError: Expected parameter loc" in res.stderr
    f = _primary(report)
    _assert_localized(f, "numerical.nonfinite_loss", "aten::div", script, "weight = reward / reward.sum()", 20)
    # the distributions' ValueError at step 21 is explained as the consequence it is
    assert [g["code"] for g in report["findings"] if g["severity"] != "info"] == [
        "numerical.nonfinite_loss", "numerical.distribution_nonfinite"]


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is needed")
def test_masked_mean_over_an_empty_mask_on_rank_0_of_two_gloo_ranks(tmp_path):
    script = DIST / "masked_mean_empty.py"
    out = tmp_path / "report.json"
    res = torchrun(["-m", "torchtriage", "run", "--json", str(out), str(script)], cwd=tmp_path, timeout=600,
                   env={"TORCHTRIAGE_RUN_DIR": str(tmp_path / "run")})
    assert res.returncode == 0, res.stderr
    report = json.loads(out.read_text())
    f = _primary(report)
    _assert_localized(f, "numerical.nonfinite_loss", "aten::div", script, "loss = (err * mask).sum() / mask.sum()", 6)
    assert f["rank"] == 0
    assert f["evidence"]["rerun as"].startswith("rank 0 of 2, alone")
    # why: the divisor is the mask's count, an int64 zero; and the batch rank 0 had at that step
    assert f["evidence"]["zeros in divisor"] == 1
    assert (f["evidence"]["input 1"]["dtype"], f["evidence"]["input 1"]["max"]) == ("torch.int64", 0.0)
    assert f["evidence"]["batch: model input 0"]["shape"] == [8, 4]
    [received] = [g for g in report["findings"] if g["code"] == "distributed.nonfinite_received"]
    assert (received["rank"], received["step"], received["evidence"]["origin rank"]) == (1, 6, 0)


def test_repro_loop_with_a_target_the_script_builds_before_its_loop(tmp_path):
    script = tmp_path / "train.py"
    script.write_text((ZOO / "script_target.py").read_text())
    bundle_dir = tmp_path / "bundle"
    res, report = _run(tmp_path, script, "--bundle", str(bundle_dir))
    f = _primary(report)
    assert (f["code"], f["op"], f["line"]) == ("numerical.nonfinite_loss", "aten::div",
                                               _line(script, "loss = (((pred - target) / target)"))
    bundle = torchtriage.load_bundle(bundle_dir)
    [entry] = bundle.meta["batch"]["inputs"]  # the script-built target is held by the bundle
    assert (entry["where"], entry["shape"]) == ("sub", [256, 1])
    replayed = torchtriage.replay(bundle, script=str(script))
    assert replayed.reproduced, replayed.describe()
    shrunk = torchtriage.shrink(bundle, lambda b: torchtriage.replay(b, script=str(script)), log=None)
    assert shrunk.invalid is None and shrunk.samples == (77,)
    assert shrunk.replays <= 20 and shrunk.replays <= 2 * math.log2(256) + 4
    from torchtriage._repro._maketest import make_test

    made = make_test(shrunk.bundle, str(tmp_path / "regress"), script=str(script))

    def pytest_passes() -> bool:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", made.test],
                           capture_output=True, text=True, timeout=600, env=_env(), cwd=tmp_path)
        return r.returncode == 0

    assert not pytest_passes()  # fails on the bug
    script.write_text(script.read_text().replace("/ target) ** 2", "/ target.clamp_min(1e-3)) ** 2"))
    assert pytest_passes()  # passes after the fix


def test_repro_loop_under_watch_with_a_script_built_target_replayed_by_a_relative_script_path(tmp_path, monkeypatch):
    """`watch(bundle_dir=)` in the user's script; replay and shrink name the script as the user
    types it (`train.py`, relative): the script-built target is still swapped and sliced."""
    script = tmp_path / "train.py"
    script.write_text((ZOO / "watched_target.py").read_text())
    res = subprocess.run([sys.executable, "train.py"], capture_output=True, text=True, timeout=600,
                         env=_env(), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    monkeypatch.chdir(tmp_path)
    bundle = torchtriage.load_bundle("bundle")
    [entry] = bundle.meta["batch"]["inputs"]
    assert (entry["where"], entry["shape"], entry["line"]) == ("sub", [256, 1], _line(script, "loss = (((pred"))
    shrunk = torchtriage.shrink(bundle, lambda b: torchtriage.replay(b, script="train.py"), log=None)
    assert shrunk.invalid is None and shrunk.samples == (77,)
    assert shrunk.replays <= 20
    from torchtriage._repro._maketest import make_test

    made = make_test(shrunk.bundle, "regress", script="train.py")

    def pytest_passes() -> bool:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", made.test],
                           capture_output=True, text=True, timeout=600, env=_env(), cwd=tmp_path)
        return r.returncode == 0

    assert not pytest_passes()  # fails on the bug
    script.write_text(script.read_text().replace("/ target) ** 2", "/ target.clamp_min(1e-3)) ** 2"))
    assert pytest_passes()  # passes after the fix
