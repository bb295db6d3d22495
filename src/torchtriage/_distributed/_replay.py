"""Replaying one rank's repro bundle in a single process (issue 15).

The script is run as that rank would run it, but in a process group of one (gloo, this host):
`init_process_group()` from the environment works, DDP wraps the model, its all-reduce of one
rank leaves the local gradients as they are, and `DistributedSampler` sees one replica (the
bundle's batch replaces the loader's anyway). What needs the other ranks cannot be replayed:
the notes say so — DDP's averaging with their gradients, the collectives the step called.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from typing import Any

import torch

from .._catalogue import msg


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def single_process(bundle: Any) -> Iterator[list[str]]:
    info = bundle.meta.get("distributed") if isinstance(bundle.meta, dict) else None
    if not info:
        yield []
        return
    notes = []
    if info.get("ddp"):
        notes.append(msg("dist.replay_needs_pg", rank=info.get("rank"), world=info.get("world_size")))
    ops = sorted(set(info.get("step_collectives") or []))
    if ops:
        notes.append(msg("dist.replay_collectives", ops=", ".join(ops)))
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    saved = {k: os.environ.get(k) for k in env}
    dist = torch.distributed
    was_initialized = dist.is_available() and dist.is_initialized()
    os.environ.update(env)
    try:
        yield notes
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if not was_initialized and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()  # the replay stopped the script before it did
