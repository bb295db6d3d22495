"""Rerunning a script to localize a non-finite value the run itself could not (issue 27).

The sentinel localizes a NaN by replaying the failing step from what the step kept. A step
whose ops outside the models were not taped (after the warm-up steps) cannot be replayed
whole; the tape is then armed, and a NaN that comes back is localized at its next occurrence.
A NaN that does not come back (one rare batch, then a crash; a poisoned model whose later
steps are its consequences; an RL update from a buffer) stays "not reproduced".

`torchtriage run` then reruns the script from the start in a child process (Megatron-LM's
rerun state machine does the same for a NaN it cannot attribute: run again, compare), with the
tape armed for the failing step only. The child stops right after that step and hands back
its findings, its loss series and what decides determinism. The parent then either

  * replaces the "not reproduced" finding by the child's localized one (op, module, line;
    evidence `localized_by: "rerun"`, and the cost: steps rerun and seconds), or
  * says why the rerun differs: torch's seed differs between the runs (the script seeds
    nothing), `torch.backends.cudnn.benchmark`, non-deterministic kernels, or the losses
    part from step K for a reason not named.

Cost: the script once more up to the failing step, on the anomaly path only. `--no-rerun`
turns it off. Distributed ranks are not rerun (a rank alone cannot run the job's collectives).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch

from .._catalogue import msg
from .._findings import Finding, Report, Severity

_RANK = "TORCHTRIAGE_RERUN_RANK"  # a rank rerun alone: "rank/world" it stands for


def pretend_rank() -> None:
    """In the child of a rank's rerun: the script runs in a process group of one (the other
    ranks are not rerun), and `get_rank()` / `get_world_size()` answer as that rank of the job,
    so that it draws its own shard of the data (its generator, its sampler's indices)."""
    spec = os.environ.get(_RANK)
    if not spec:
        return
    rank, world = (int(v) for v in spec.split("/"))
    dist = torch.distributed
    get_rank, get_world_size = dist.get_rank, dist.get_world_size

    def rank_of(group: Any = None) -> int:
        return rank if group is None else get_rank(group)

    def world_of(group: Any = None) -> int:
        return world if group is None else get_world_size(group)

    dist.get_rank, dist.get_world_size = rank_of, world_of  # (this child process only)


# ---------------------------------------------------------------------- the child
def child_state(session: Any) -> dict[str, Any]:
    """What the child hands back: its findings, its loss series, what decides determinism."""
    report = session.report
    return {
        "findings": [f.to_dict() for f in report.findings],
        "series": {k: v for k, v in report.series.items() if k == "loss"},
        "seed": torch.initial_seed(),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "deterministic": bool(torch.are_deterministic_algorithms_enabled()),
        "bundle": getattr(session.checker("repro"), "written", None),
    }


def write_child(session: Any, path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(child_state(session), fh, default=str)


def stop_child(session: Any) -> None:
    """The failing step is done in the child: hand back and end the process at once (the rest
    of the script need not run; the child's output is discarded)."""
    path = session.options.get("rerun_out")
    if path:
        try:
            write_child(session, path)
        finally:
            sys.stdout.flush()
            os._exit(0)


# ---------------------------------------------------------------------- the parent
def unlocalized(report: Report) -> Finding | None:
    """The first non-finite finding the run named no op for (not reproduced, read late)."""
    for f in sorted(report.findings, key=lambda f: f.order):
        if f.code.startswith("numerical.nonfinite_") and f.op is None and f.step is not None \
                and f.severity is not Severity.INFO and f.code != "numerical.nonfinite_data" \
                and f.file is None:
            return f
    return None


def rerun(report: Report, command: list[str], *, seed: int, elapsed: float,
          bundle: str | None = None, rank: tuple[int, int] | None = None) -> Report:
    """Rerun `command` (a `torchtriage run` command line without the rerun options) up to the
    step of the unlocalized finding; the report with that finding localized, or with the reason
    the rerun could not."""
    f = unlocalized(report)
    if f is None:
        return report
    step = int(f.step)  # type: ignore[arg-type]
    fd, out = tempfile.mkstemp(prefix="torchtriage-rerun-", suffix=".json")
    os.close(fd)
    tmp_bundle = tempfile.mkdtemp(prefix="torchtriage-rerun-bundle-") if bundle else None
    cmd = [sys.executable, "-m", "torchtriage", "run", "--quiet", "--rerun-at", str(step), "--rerun-out", out]
    if tmp_bundle:
        cmd += ["--bundle", os.path.join(tmp_bundle, "b")]
    cmd += command
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if rank is not None:
        # one rank of a job: rerun alone, in a process group of one, answering as that rank
        from .._distributed._replay import _free_port

        for k in list(env):  # (torchrun's agent store and the job's run directory are the job's)
            if k.startswith(("TORCHELASTIC_", "TORCHTRIAGE_RUN_DIR")) or k in ("GROUP_RANK", "ROLE_RANK"):
                env.pop(k)
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(_free_port()), **{_RANK: f"{rank[0]}/{rank[1]}"})
    t0 = time.monotonic()
    try:
        subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=env, timeout=max(120.0, 3 * elapsed + 60), check=False)
        with open(out, encoding="utf-8") as fh:
            child = json.load(fh)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return _replace(report, f, f.replace(evidence=dict(
            f.evidence, rerun=msg("nonfinite.rerun.failed", error=f"{type(e).__name__}: {e}"))))
    finally:
        try:
            os.unlink(out)
        except OSError:
            pass
    seconds = time.monotonic() - t0
    cost = msg("nonfinite.rerun.cost", steps=step + 1, seconds=f"{seconds:.1f}")
    found = _match(child, f)
    if found is not None:
        ev = dict(f.evidence)
        ev.pop("why", None)
        ev.update(found.evidence)
        ev["replayed by"] = found.evidence.get("localized_by")
        ev["localized_by"] = "rerun"
        ev["rerun"] = cost
        if rank is not None:
            ev["rerun as"] = msg("nonfinite.rerun.rank", rank=rank[0], world=rank[1])
        new = found.replace(count=f.count, order=f.order, evidence=ev, rank=f.rank, local_rank=f.local_rank,
                            host=f.host)
        if bundle and child.get("bundle"):
            _take_bundle(str(child["bundle"]), bundle)
        return _replace(report, f, new)
    why = _nondeterminism(report, child, step, seed)
    ev = dict(f.evidence, rerun=cost, **{"why the rerun differs": why})
    return _replace(report, f, f.replace(evidence=ev))


def _match(child: dict[str, Any], f: Finding) -> Finding | None:
    """The child's localized finding of the same step (and stage), if any."""
    for d in child.get("findings", []):
        try:
            g = Finding.from_dict(d)
        except (ValueError, TypeError, KeyError):
            continue
        if g.step == f.step and g.code.startswith("numerical.") and g.file is not None \
                and g.severity is not Severity.INFO:
            return g
    return None


def _nondeterminism(report: Report, child: dict[str, Any], step: int, seed: int) -> str:
    """Why the rerun did not meet the same non-finite value: named when it can be."""
    if child.get("seed") != seed:
        return msg("nonfinite.rerun.unseeded", a=seed, b=child.get("seed"))
    if child.get("cudnn_benchmark"):
        return msg("nonfinite.rerun.cudnn_benchmark")
    ours = report.series.get("loss", [])
    theirs = child.get("series", {}).get("loss", [])
    for k, (a, b) in enumerate(zip(ours, theirs)):
        if a is None or b is None:
            continue
        if not (a == b or (math.isnan(a) and math.isnan(b))):
            if not child.get("deterministic") and torch.cuda.is_available():
                return msg("nonfinite.rerun.kernels", step=k, a=a, b=b)
            return msg("nonfinite.rerun.parted", step=k, a=a, b=b)
    return msg("nonfinite.rerun.gone", step=step)


def _replace(report: Report, old: Finding, new: Finding) -> Report:
    findings = tuple(new if g is old else g for g in report.findings)
    return type(report)(findings, meta=report.meta, series=report.series)


def _take_bundle(src: str, dst: str) -> None:
    """The child's bundle (the failing step taped: every external input) replaces the run's."""
    import shutil

    try:
        if os.path.isdir(dst):
            shutil.rmtree(dst)
        shutil.copytree(src, dst)
        print(msg("nonfinite.rerun.bundle", path=dst), file=sys.stderr)
    except OSError:
        pass
