"""Which rank this process is, and the run directory the ranks of one job share.

Read from torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, set before the script calls
`init_process_group`) or from an initialized default process group (`mp.spawn` launches).
`active()` is the one test the session makes: a dictionary lookup and, when torch.distributed
is built, `is_initialized()` — nothing else runs in a single process (issue 15).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import tempfile

import torch


@dataclasses.dataclass(frozen=True)
class RankInfo:
    rank: int
    local_rank: int
    world_size: int
    host: str


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def active() -> bool:
    """True in a process that is one rank of several."""
    world = _env_int("WORLD_SIZE")
    if world is not None and world > 1:
        return True
    dist = getattr(torch, "distributed", None)
    return bool(dist is not None and dist.is_available() and dist.is_initialized()
                and dist.get_world_size() > 1)


def rank_info() -> RankInfo | None:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        env_rank, env_world = _env_int("RANK"), _env_int("WORLD_SIZE")
        if env_rank is None or env_world is None:
            return None
        rank, world = env_rank, env_world
    local = _env_int("LOCAL_RANK")
    return RankInfo(rank, rank if local is None else local, world, socket.gethostname())


def run_dir(rank: int | None = None) -> str:
    """The folder the ranks of this job write to: TORCHTRIAGE_RUN_DIR, else one under the
    temporary folder named after what the job's ranks on this host share (torchrun's run id,
    the rendezvous address and restart count, and the launching process)."""
    given = os.environ.get("TORCHTRIAGE_RUN_DIR")
    if given:
        # "{rank}" in it gives each rank its own folder, as ranks on separate hosts have: the
        # exchange then goes through torchrun's store alone (what the tests use to check it)
        return given.replace("{rank}", str(rank) if rank is not None else os.environ.get("RANK", "0"))
    parts = [os.environ.get(k, "") for k in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT",
                                             "TORCHELASTIC_RESTART_COUNT")]
    parts.append(str(os.getppid()))
    key = hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"torchtriage-run-{key}")


def parse_stall_timeout(value: object) -> float | None:
    """`stall_timeout` as seconds (> 0, finite), or None for the automatic default."""
    if value is None:
        return None
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = -1.0
    if not 0 < seconds < float("inf") or isinstance(value, bool):
        from .._errors import ConfigError

        raise ConfigError(f"stall_timeout={value!r} is not valid; expected a number of seconds > 0 (or None: "
                          "20x the slowest step, at least 300)")
    return seconds


def rank_bundle_dir(bundle_dir: object) -> str:
    """DIR/rank-R: each rank writes its own repro bundle."""
    info = rank_info()
    base = os.fspath(bundle_dir)  # type: ignore[call-overload]
    return base if info is None else os.path.join(base, f"rank-{info.rank}")
