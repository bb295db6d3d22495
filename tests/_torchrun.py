"""Launch a script under `python -m torch.distributed.run` or `accelerate launch` (gloo, CPU) for the
distributed tests: a free port, a bounded time, and no process left behind (the agent starts each
worker in its own session, so the workers are found through /proc and ended by pid)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tagged(token: str) -> list[int]:
    """Live processes whose environment holds TORCHTRIAGE_TEST_TOKEN=token (the agent and its
    workers: they inherit it, even once reparented)."""
    needle = f"TORCHTRIAGE_TEST_TOKEN={token}".encode()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{d}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(d))
    return found


def torchrun(args: list[str], *, cwd: Path, nproc: int = 2, timeout: float = 120.0,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m torch.distributed.run --nproc-per-node N ARGS`, its output and exit code."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--monitor-interval", "0.2", *args]
    return launched(cmd, cwd=cwd, timeout=timeout, env=env)


def triaged(script: Path, *args: str, cwd: Path, timeout: float = 150.0) -> dict[str, Any]:
    """`torchtriage run --json` of `script ARGS` under torchrun (2 ranks): the JSON report, after
    checking the run ended cleanly (exit 0, no internal warning, no run directory left behind)."""
    out = cwd / "report.json"
    res = torchrun(["-m", "torchtriage", "run", "--json", str(out), str(script), *args],
                   cwd=cwd, timeout=timeout, env={"TORCHTRIAGE_RUN_DIR": str(cwd / "run")})
    assert not list(cwd.glob("run*/*")), "the run directory is left behind"
    assert res.returncode == 0, res.stderr
    assert "TriageInternalWarning" not in res.stderr
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def accelerate_launch(args: list[str], *, cwd: Path, nproc: int = 2, timeout: float = 120.0,
                      env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`accelerate launch --multi_gpu --num_processes N ARGS` on CPU: Accelerate's launcher runs
    torchrun's agent in its own process; `ACCELERATE_USE_CPU` (what `--cpu` sets) makes each
    `Accelerator()` take gloo. HF_HOME is the test's folder: no user config file is read."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(nproc),
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()), "--monitor_interval", "0.2",
           *args]
    return launched(cmd, cwd=cwd, timeout=timeout,
                    env={"ACCELERATE_USE_CPU": "true", "HF_HOME": str(cwd / "hf_home"), **(env or {})})


def launched(cmd: list[str], *, cwd: Path, timeout: float,
             env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
    """Run a launcher command, its output and exit code; nothing it started may stay behind."""
    token = uuid.uuid4().hex
    full_env = dict(os.environ, TORCHTRIAGE_TEST_TOKEN=token,
                    PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(token)
        out, err = proc.communicate()
        raise AssertionError(f"{cmd[2]} did not finish in {timeout} s\n{out}\n{err}") from None
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    # Nothing may stay behind (a worker left hanging in a collective would be found here).
    deadline = time.monotonic() + 5.0
    left = tagged(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = tagged(token)
    _kill(token)
    assert not left, f"processes left behind: {left}"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _kill(token: str) -> None:
    for pid in tagged(token):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


