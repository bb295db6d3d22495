"""Distributed training (issue 15): two gloo ranks on CPU under `python -m torch.distributed.run`.

One merged report, written once and printed once; the rank that made a NaN gets the diagnosis
and the rank that received it through the all-reduce an info; DDP's unused parameters named
with the step and the fix; a collective mismatch that would hang reported and ended by the
watchdog; a correct DDP loop stays quiet. Every launch is bounded and leaves no process behind
(`_torchrun.torchrun` asserts it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from _lines import line_in
from _torchrun import free_port, launched, torchrun
from torchtriage import Finding, Report
from torchtriage._distributed import _merge

ZOO = Path(__file__).resolve().parent / "zoo" / "distributed"

pytestmark = pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                                reason="torch.distributed with gloo is needed")


def _line(script: str, text: str) -> int:
    return line_in(ZOO / script, text)


def _run(tmp_path, script, *tt_args, script_args=(), timeout=120, run_dir="run"):
    out = tmp_path / "report.json"
    res = torchrun(["-m", "torchtriage", "run", "--json", str(out), *tt_args, str(ZOO / script), *script_args],
                   cwd=tmp_path, timeout=timeout, env={"TORCHTRIAGE_RUN_DIR": str(tmp_path / run_dir)})
    assert not list(tmp_path.glob("run*/*")), "the run directory is left behind"
    report = json.loads(out.read_text()) if out.exists() else None
    return res, report


def _by_code(report, code):
    return [f for f in report["findings"] if f["code"] == code]


def test_nan_from_one_ranks_data_is_diagnosed_on_that_rank_and_received_on_the_other(tmp_path):
    res, report = _run(tmp_path, "nan_one_rank.py")
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("== torchtriage report ==") == 1  # printed once, by rank 0
    primary = report["findings"][report["primary"]]
    assert (primary["code"], primary["severity"], primary["rank"], primary["local_rank"], primary["step"],
            primary["stage"]) == ("numerical.nonfinite_data", "error", 1, 1, 2, "data")
    assert primary["evidence"]["input"]["nan"] == 1
    [received] = _by_code(report, "distributed.nonfinite_received")
    assert (received["severity"], received["rank"], received["step"], received["stage"]) == ("info", 0, 2, "backward")
    assert received["message"] == ("Non-finite gradients received through the all-reduce from rank 1 at step 2: "
                                   "this rank's own gradients were finite")
    assert received["evidence"]["origin rank"] == 1
    assert received["evidence"]["local gradients finite"] is True
    # rank 0 has no warning or error of its own: the replay "did not reproduce it" is gone
    assert [f["code"] for f in report["findings"] if f["rank"] == 0 and f["severity"] != "info"] == []
    assert "host" not in primary  # one host: no host key
    assert report["meta"]["world_size"] == 2
    assert report["meta"]["ranks"]["1"]["ended"] == "ok"
    assert not (tmp_path / "run").exists()  # the run directory is cleaned up


def test_a_ranks_bundle_replays_in_one_process_and_says_what_it_cannot_replay(tmp_path):
    # "metric": the step also all-reduces its loss for logging, a collective of its own
    res, report = _run(tmp_path, "nan_one_rank.py", "--bundle", str(tmp_path / "bundle"), script_args=["metric"])
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in (tmp_path / "bundle").iterdir()) == ["rank-1"]  # the rank that made it
    meta = json.loads((tmp_path / "bundle" / "rank-1" / "meta.json").read_text())
    metric = _line("nan_one_rank.py", "dist.all_reduce(logged)")
    assert meta["distributed"] == {"rank": 1, "world_size": 2, "ddp": True,
                                   "step_collectives": [f"all_reduce() at nan_one_rank.py:{metric}"]}
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src")
    out = subprocess.run([sys.executable, "-m", "torchtriage", "replay", str(tmp_path / "bundle" / "rank-1")],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stderr  # 1: the failure reproduced
    assert out.stdout.splitlines() == [
        "reproduced: numerical/numerical.nonfinite_data module=None op=None",
        "this step ran under DistributedDataParallel (rank 1 of 2): its all-reduce needs the other ranks, "
        "so a single-process replay computes the local gradients only",
        f"the step called collectives (all_reduce() at nan_one_rank.py:{metric}): in a single-process replay they "
        "see this rank's values only; to reproduce what the other ranks sent, replay the whole job under torchrun"]
    assert "rank=" not in out.stderr


def test_unused_parameters_are_named_with_the_step_and_the_branch(tmp_path):
    res, report = _run(tmp_path, "unused_branch.py")
    assert res.returncode != 0  # DDP raised "Expected to have finished reduction ..." on both ranks
    assert "Expected to have finished reduction in the prior iteration" in res.stderr
    assert res.stderr.count("== torchtriage report ==") == 1
    # one finding: the exception triage's (with the branch of forward), with this check's evidence
    [f] = [f for f in report["findings"] if f["severity"] != "info"]
    assert (f["category"], f["code"], f["step"]) == ("gradient", "gradient.ddp_unused_parameters", 2)
    assert f["message"] == "DDP: parameters aux.weight, aux.bias got no gradient in step 1"
    branch = _line("unused_branch.py", "if use_aux:")
    assert f"(unused_branch.py:{branch} if use_aux:)" in f["cause"]
    assert "find_unused_parameters=True" in f["next_check"]
    ev = f["evidence"]
    assert (ev["unused parameters"], ev["modules"], ev["seen at the backward of step"], ev["ranks"]) == (
        ["aux.weight", "aux.bias"], ["aux"], 1, [0, 1])
    assert _by_code(report, "distributed.unused_parameters") == []


def test_unused_parameters_in_the_last_step_are_found_before_ddp_fails(tmp_path):
    res, report = _run(tmp_path, "unused_branch.py", script_args=["last"])
    assert res.returncode == 0, res.stderr  # the loop ended before DDP's next forward could fail
    [f] = report["findings"]
    assert (f["category"], f["code"], f["severity"], f["step"], f["stage"], f["module"]) == (
        "distributed", "distributed.unused_parameters", "error", 3, "backward", "aux")
    assert f["message"] == (
        "2 parameter(s) received no gradient at step 3 while DDP expected all of them (aux.weight, aux.bias): "
        "DDP (find_unused_parameters=False) waits for them and fails at the next forward with "
        "'Expected to have finished reduction in the prior iteration'")
    assert f["cause"] == ("module(s) aux did not take part in the loss at step 3 (a branch of forward "
                          "skipped them, or their output was not used in the loss).")
    assert "find_unused_parameters=True" in f["next_check"]
    assert "0.0 * branch_output.sum()" in f["next_check"]
    assert f["evidence"]["ranks"] == [0, 1]  # one finding for both ranks


def test_find_unused_parameters_without_unused_parameters_is_an_info(tmp_path):
    res, report = _run(tmp_path, "unused_find_unused.py")
    assert res.returncode == 0, res.stderr
    assert [(f["code"], f["severity"]) for f in report["findings"]] == [("distributed.find_unused_idle", "info")]
    f = report["findings"][0]
    assert (f["message"]
            == "find_unused_parameters=True, but every parameter received a gradient in each of the 3 step(s)")
    assert "static_graph=True" in f["next_check"]
    assert report["primary"] is None


@pytest.mark.parametrize("run_dir", ["run", "run-{rank}"], ids=["shared-folder", "store-only"])
def test_a_collective_mismatch_that_would_hang_is_reported_and_ended(tmp_path, run_dir):
    # "run-{rank}": each rank its own folder, as on separate hosts: torchrun's store carries it
    res, report = _run(tmp_path, "early_stop_barrier.py", "--stall-timeout", "3", run_dir=run_dir)
    assert res.returncode != 0
    assert "exit code 124" in res.stderr and "exitcode  : 124" in res.stderr
    assert res.stderr.count("== torchtriage report ==") == 1
    f = report["findings"][report["primary"]]
    backward = _line("early_stop_barrier.py", "loss.backward()")
    barrier = _line("early_stop_barrier.py", "dist.barrier()")
    assert (f["category"], f["code"], f["severity"], f["rank"], f["step"], f["line"]) == (
        "distributed", "distributed.stall", "error", 0, 2, backward)
    assert f["message"].startswith("The job stalled for ")
    assert f["message"].endswith(
        f"rank 0 waits in the gradient all-reduce of backward() at early_stop_barrier.py:{backward}; "
        f"rank 1 waits in barrier() at early_stop_barrier.py:{barrier}")
    assert f"early_stop_barrier.py:{barrier} in <module>: dist.barrier()" in f["evidence"]["rank 1 stack"][0]
    branch = _line("early_stop_barrier.py", "if rank == 1 and step == 2:")
    assert f["evidence"]["rank-dependent branch"] == [f"early_stop_barrier.py:{branch} if rank == 1 and step == 2:"]
    assert f["cause"].endswith(
        f"The ranks part at a condition on the rank (early_stop_barrier.py:{branch} if rank == 1 and step == 2:).")
    assert report["meta"]["exit_code"] == 124


def test_a_rank_blocked_while_holding_the_interpreter_is_read_through_faulthandler(tmp_path):
    res, report = _run(tmp_path, "blocked_interpreter.py", "--stall-timeout", "3")
    assert res.returncode != 0
    assert res.stderr.count("== torchtriage report ==") == 1
    [f] = report["findings"]
    blocked = _line("blocked_interpreter.py", "re.match(")
    barrier = _line("blocked_interpreter.py", "dist.barrier()")
    assert (f["code"], f["rank"], f["line"]) == ("distributed.stall", 1, barrier)
    assert f["message"].endswith(
        f"rank 0 is blocked at blocked_interpreter.py:{blocked} (in match), inside a call that holds the Python "
        f"interpreter (its stack from faulthandler); rank 1 waits in barrier() at blocked_interpreter.py:{barrier}")
    assert f'blocked_interpreter.py", line {blocked} in <module>' in f["evidence"]["rank 0 stack"][-1]


def test_a_rank_that_raised_leaves_the_other_waiting_reported(tmp_path):
    res, report = _run(tmp_path, "raise_one_rank.py", "--stall-timeout", "4")
    assert res.returncode != 0
    assert res.stderr.count("== torchtriage report ==") == 1
    primary = report["findings"][report["primary"]]
    line = _line("raise_one_rank.py", "loss = model(x)")
    assert (primary["category"], primary["rank"], primary["step"], primary["line"]) == ("shape", 0, 1, line)
    [stall] = _by_code(report, "distributed.stall")
    backward = _line("raise_one_rank.py", "loss.backward()")
    assert stall["message"].endswith(
        f"rank 1 waits in the gradient all-reduce of backward() at raise_one_rank.py:{backward}; "
        "rank 0 has ended (raised RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x5 and 4x1))")


def test_collectives_called_in_a_different_order_are_named(tmp_path):
    res, report = _run(tmp_path, "mismatched_all_reduce.py")
    assert res.returncode == 0, res.stderr
    [f] = report["findings"]
    a = _line("mismatched_all_reduce.py", "dist.all_reduce(loss_sum)")
    b = _line("mismatched_all_reduce.py", "dist.all_reduce(count)")
    assert (f["code"], f["severity"], f["line"]) == ("distributed.rank_dependent_collectives", "error", a)
    assert f["message"] == (f"The ranks called different collectives: call 1 is all_reduce() at "
                            f"mismatched_all_reduce.py:{a} on rank 0 "
                            f"but all_reduce() at mismatched_all_reduce.py:{b} on rank 1")
    branch = _line("mismatched_all_reduce.py", "if rank == 0:")
    assert f["evidence"]["rank-dependent branch"] == [f"mismatched_all_reduce.py:{branch} if rank == 0:"]


def test_parameters_that_differ_across_ranks_at_the_start(tmp_path):
    res, report = _run(tmp_path, "unseeded_replicas.py")
    assert res.returncode == 0, res.stderr
    [f] = report["findings"]
    names = ["model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"]
    assert (f["code"], f["severity"], f["step"], f["evidence"]["differ"]) == (
        "distributed.params_differ", "error", 0, names)
    assert f["message"] == ("4 parameter(s) or buffer(s) differ across ranks at the first step: "
                            + ", ".join(names))
    assert "Seed every rank the same" in f["next_check"]


@pytest.mark.parametrize("mode", ["keep", "broadcast"])
def test_buffers_that_differ_across_ranks_unless_ddp_broadcasts_them(tmp_path, mode):
    res, report = _run(tmp_path, "per_rank_buffer.py", script_args=[mode] if mode == "keep" else [])
    assert res.returncode == 0, res.stderr
    if mode == "broadcast":  # DDP's default copies rank 0's buffers at every forward
        assert report["findings"] == [], res.stderr
        return
    [f] = report["findings"]
    assert (f["code"], f["severity"], f["evidence"]["differ"]) == (
        "distributed.params_differ", "error", ["model.module.mean"])


def test_a_correct_ddp_loop_stays_quiet(tmp_path):
    # --json -: every rank shares the standard output, so a report written by each rank would
    # show twice; the merged one is written once, by rank 0
    res = torchrun(["-m", "torchtriage", "run", "--json", "-", str(ZOO / "clean_ddp.py"), str(tmp_path)],
                   cwd=tmp_path, timeout=120, env={"TORCHTRIAGE_RUN_DIR": str(tmp_path / "run")})
    assert res.returncode == 0, res.stderr
    assert res.stdout.count('"schema": "torchtriage.report/1"') == 1, res.stdout
    report = json.loads(res.stdout)
    assert report["findings"] == [], res.stderr
    assert res.stderr.count("== torchtriage report ==") == 1
    assert "No finding" in res.stderr
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.pt")) == ["ckpt-0.pt", "ckpt-1.pt"]
    assert report["meta"]["world_size"] == 2 and report["meta"]["steps"] == 4


def test_watch_inside_a_ddp_script_merges_on_rank_0(tmp_path):
    out = tmp_path / "watch.json"
    res = torchrun([str(ZOO / "watch_nan.py"), str(out)], cwd=tmp_path,
                   env={"TORCHTRIAGE_RUN_DIR": str(tmp_path / "run")})
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("== torchtriage report ==") == 1
    report = json.loads(out.read_text())
    primary = report["findings"][report["primary"]]
    assert (primary["code"], primary["rank"], primary["step"], primary["op"]) == (
        "numerical.nonfinite_loss", 0, 1, "aten::log")
    [received] = _by_code(report, "distributed.nonfinite_received")
    assert ((received["rank"], received["step"], received["severity"], received["evidence"]["origin rank"])
            == (1, 1, "info", 0))


def test_fsdp_nan_from_one_rank_without_replay_or_hang(tmp_path):
    res, report = _run(tmp_path, "fsdp_nan.py", "--stall-timeout", "20", script_args=["nan"])
    assert res.returncode == 0, res.stderr
    codes = [(f["code"], f["severity"], f.get("rank"), f["step"]) for f in report["findings"]]
    assert codes == [("numerical.nonfinite_data", "error", 1, 2),
                     ("distributed.nonfinite_received", "info", 0, 2),
                     ("distributed.fsdp_limits", "info", 0, None)], res.stderr
    received = report["findings"][1]
    assert received["evidence"]["origin rank"] == 1
    assert report["findings"][2]["evidence"]["ranks"] == [0, 1]
    assert "TriageInternalWarning" not in res.stderr


def test_a_correct_fsdp_loop_stays_quiet_but_for_the_fsdp_info(tmp_path):
    res, report = _run(tmp_path, "fsdp_nan.py", "--stall-timeout", "20")
    assert res.returncode == 0, res.stderr
    assert [(f["code"], f["severity"], f["evidence"]["ranks"]) for f in report["findings"]] == [
        ("distributed.fsdp_limits", "info", [0, 1])], res.stderr
    assert report["primary"] is None and "TriageInternalWarning" not in res.stderr


def test_lightning_ddp_strategy_under_torchrun(tmp_path):
    pytest.importorskip("lightning")
    res, report = _run(tmp_path, "lightning_ddp_nan.py", "--stall-timeout", "30", timeout=240)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("== torchtriage report ==") == 1
    primary = report["findings"][report["primary"]]
    # the LightningModule has no forward of its own: DDP's forward is not replayed by one rank
    assert (primary["code"], primary["rank"], primary["step"], primary["stage"]) == (
        "distributed.nonfinite_sharded", 1, 2, "forward")
    [received] = _by_code(report, "distributed.nonfinite_received")
    assert (received["rank"], received["step"], received["evidence"]["origin rank"]) == (0, 2, 1)
    assert [f["code"] for f in report["findings"] if f["rank"] == 0 and f["severity"] != "info"] == []
    assert "TriageInternalWarning" not in res.stderr


def test_hf_trainer_under_torchrun_is_quiet_but_for_the_find_unused_info(tmp_path):
    pytest.importorskip("transformers")
    res, report = _run(tmp_path, "hf_trainer_ddp.py", "--stall-timeout", "60", script_args=[str(tmp_path / "out")],
                       timeout=240)
    assert res.returncode == 0, res.stderr
    assert [(f["code"], f["severity"], f["evidence"]["ranks"]) for f in report["findings"]] == [
        ("distributed.find_unused_idle", "info", [0, 1])]
    assert "ddp_find_unused_parameters=False" in report["findings"][0]["next_check"]


def test_ddp_checks_ride_the_one_host_read_per_step(tmp_path):
    # the local-gradient sums (before DDP's all-reduce) and the first step's fingerprints are
    # queued on the device and read with the sentinel's one read per optimizer step, on each rank
    res = torchrun([str(ZOO / "ddp_host_reads.py"), str(tmp_path)], cwd=tmp_path,
                   env={"TORCHTRIAGE_RUN_DIR": str(tmp_path / "run")})
    assert res.returncode == 0, res.stderr
    for rank in (0, 1):
        data = json.loads((tmp_path / f"reads-{rank}.json").read_text())
        assert data["findings"] == []
        assert len(data["per_step"]) == 6
        for calls in data["per_step"]:
            assert [name for name, _ in calls] == ["tolist"], calls
            assert "_nonfinite/_sentinel.py:_read" in calls[0][1], calls


def test_watch_stall_timeout_reports_the_mismatch_and_ends_the_job(tmp_path):
    res = torchrun([str(ZOO / "watch_stall.py")], cwd=tmp_path, env={"TORCHTRIAGE_RUN_DIR": str(tmp_path / "run")})
    assert res.returncode != 0
    assert "exit code 124" in res.stderr and "exitcode  : 124" in res.stderr
    assert res.stderr.count("== torchtriage report ==") == 1
    backward = _line("watch_stall.py", "loss.backward()")
    barrier = _line("watch_stall.py", "dist.barrier()")
    assert (f"rank 0 waits in the gradient all-reduce of backward() at watch_stall.py:{backward}; "
            f"rank 1 waits in barrier() at watch_stall.py:{barrier}") in res.stderr
    assert not (tmp_path / "run").exists()


def test_mp_spawn_without_a_launcher_store_exchanges_through_the_groups_store(tmp_path):
    # no torchrun: no agent store; "run-{rank}": no shared folder either, as on separate hosts.
    # The records go through the store the process group was created on.
    out = tmp_path / "report.json"
    res = launched([sys.executable, str(ZOO / "spawn_nan.py"), str(out), str(free_port())], cwd=tmp_path,
                 timeout=180, env={"TORCHTRIAGE_RUN_DIR": str(tmp_path / "run-{rank}")})
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("== torchtriage report ==") == 1
    report = json.loads(out.read_text())
    assert [(f["code"], f["severity"], f["rank"], f["step"]) for f in report["findings"]] == [
        ("numerical.nonfinite_data", "error", 1, 1), ("distributed.nonfinite_received", "info", 0, 1)]
    assert report["findings"][1]["evidence"]["origin rank"] == 1
    assert {r: v["ended"] for r, v in report["meta"]["ranks"].items()} == {"0": "ok", "1": "ok"}
    assert not list(tmp_path.glob("run-*/*"))


# ---------------------------------------------------------------- without launching ranks
def test_the_default_stall_timeout_is_a_multiple_of_the_slowest_step_with_a_floor():
    from types import SimpleNamespace

    from torchtriage._distributed import _watchdog

    owner = SimpleNamespace(slowest_step=2.0)
    dog = _watchdog.Watchdog(owner, timeout=None)
    assert dog.timeout() == _watchdog.FLOOR == 300.0  # 20 x 2 s is below the floor
    owner.slowest_step = 40.0
    assert dog.timeout() == _watchdog.MULTIPLE * 40.0 == 800.0
    assert _watchdog.Watchdog(owner, timeout=3.0).timeout() == 3.0  # --stall-timeout / stall_timeout=


def test_findings_name_the_host_when_the_ranks_run_on_several():
    def rec(rank, host):
        f = Finding("gradient", "gradient.x", "m", step=1, severity="warning").to_dict()
        return {"rank": rank, "local_rank": 0, "host": host, "ended": {"how": "ok"},
                "report": {"findings": [f] if rank == 1 else [], "meta": {"steps": 2}},
                "collectives": {"sites": {}, "sequence": [], "total": 0}}

    two = _merge.merge({0: rec(0, "node-a"), 1: rec(1, "node-b")}, 2)
    assert [(f.rank, f.local_rank, f.host) for f in two.findings] == [(1, 0, "node-b")]
    assert two.findings[0].to_dict()["host"] == "node-b"
    assert two.meta["ranks"]["1"]["host"] == "node-b"
    one = _merge.merge({0: rec(0, "node-a"), 1: rec(1, "node-a")}, 2)
    assert one.findings[0].host is None and "host" not in one.findings[0].to_dict()


def test_single_process_reports_carry_no_rank_keys_and_load_no_distributed_check(tmp_path):
    script = tmp_path / "one.py"
    script.write_text("import sys, torch, torchtriage, torch.nn as nn\n"
                      "m = nn.Linear(2, 1)\n"
                      "with torchtriage.watch(m, report=False) as s:\n"
                      "    m(torch.tensor([[1.0, float('nan')]])).sum().backward()\n"
                      "print(s.report.to_dict()['findings'][0].keys() >= {'code'}, "
                      "'rank' in s.report.to_dict()['findings'][0],"
                      " 'torchtriage._distributed._checker' in sys.modules)\n")
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    import os

    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")} | env)
    assert out.stdout.split() == ["True", "False", "False"], out.stderr


def test_finding_rank_keys_round_trip_through_json():
    f = Finding("numerical", "numerical.x", "m", rank=1, local_rank=1)
    d = f.to_dict()
    assert (d["rank"], d["local_rank"], "host" in d) == (1, 1, False)
    assert Report.from_dict(Report((f,)).to_dict()).findings[0].rank == 1
    assert "rank" not in Finding("numerical", "numerical.x", "m").to_dict()


def test_merge_orders_by_step_and_names_the_first_differing_collective():
    def rec(rank, findings, sequence, sites):
        return {"rank": rank, "local_rank": rank, "host": "h", "ended": {"how": "ok"},
                "report": {"findings": findings, "meta": {"steps": 3}},
                "collectives": {"sites": sites, "sequence": sequence, "total": len(sequence)}}

    early = Finding("gradient", "gradient.x", "late category, early step", step=1, severity="warning").to_dict()
    late = Finding("gradient", "gradient.y", "same category, later step", step=5, severity="warning").to_dict()
    sites = {"0": ["barrier()", "/t/train.py", 10], "1": ["all_reduce()", "/t/train.py", 12]}
    merged = _merge.merge({0: rec(0, [late], [0, 1], sites), 1: rec(1, [early], [0, 0], sites)}, 2)
    assert [(f.code, f.rank) for f in merged.findings][:2] == [("gradient.x", 1), ("gradient.y", 0)]
    [seq] = merged.filter(code="distributed.rank_dependent_collectives")
    assert seq.message == ("The ranks called different collectives: call 2 is all_reduce() at train.py:12 on "
                           "rank 0 but barrier() at train.py:10 on rank 1")


def test_the_branch_on_the_rank_around_a_collective(tmp_path):
    from torchtriage._distributed._branch import rank_branch

    script = tmp_path / "train.py"
    script.write_text("import torch.distributed as dist\n"
                      "for epoch in range(2):\n"
                      "    if dist.get_rank() == 0:\n"
                      "        dist.all_reduce(total)\n"
                      "    while not trainer.is_global_zero and waiting:\n"
                      "        dist.barrier()\n"
                      "    if epoch > 0:\n"
                      "        dist.barrier()\n")
    assert rank_branch(str(script), 4) == "train.py:3 if dist.get_rank() == 0:"
    assert rank_branch(str(script), 6) == "train.py:5 while not trainer.is_global_zero and waiting:"
    assert rank_branch(str(script), 8) is None  # a condition on the epoch, the same on every rank
    assert rank_branch(str(script), 3) is None  # the condition's own line is not under it
    assert rank_branch(str(tmp_path / "gone.py"), 3) is None


def test_bad_stall_timeout_is_one_line_and_exit_2(tmp_path, capsys):
    from torchtriage._cli import main

    script = tmp_path / "s.py"
    script.write_text("pass\n")
    assert main(["run", "--stall-timeout", "soon", str(script)]) == 2
    assert capsys.readouterr().err.strip().endswith("--stall-timeout soon: expected a number of seconds > 0")


def test_bad_stall_timeout_in_watch_is_a_config_error():
    import torchtriage
    from torchtriage._errors import ConfigError

    with pytest.raises(ConfigError, match=r"stall_timeout='soon' is not valid; expected a number of seconds > 0"):
        torchtriage.watch(torch.nn.Linear(1, 1), stall_timeout="soon")


def test_a_faulthandler_dump_read_while_it_is_written_leaves_out_the_partial_line(tmp_path):
    # the leader may read a blocked rank's dump while faulthandler is still writing it
    from torchtriage._distributed._rundir import RunDir
    from torchtriage._distributed._watchdog import _fh_stack

    script = str(tmp_path / "train.py")
    rd = RunDir(str(tmp_path / "run"), 0, 2)
    complete = (f'Current thread 0x00007f (most recent call first):\n'
                f'  File "/usr/lib/python3.11/re/__init__.py", line 166 in match\n'
                f'  File "{script}", line 11 in <module>\n')
    with open(rd.file("fh-1.txt"), "w", encoding="utf-8") as fh:
        fh.write(complete + '  File "/opt/site-packages/torchtriage/_cli/ru')
    assert _fh_stack(rd, 1) == ['File "/usr/lib/python3.11/re/__init__.py", line 166 in match',
                                f'File "{script}", line 11 in <module>']
