"""One side of a diff, as the `run` command runs it (issue 28): `torchtriage run --record DIR`
attaches an `OpRecorder` that writes DIR when its last step ends. `torchtriage diff` runs each
side so, in its own process, adding `--record-stop` (the process ends there: both sides run
the same steps, and no longer than those), `--record-seed` (seeded alike before the script),
`--record-init A` (A's weights copied in) and `--record-seeds A` (A's seed values used for the
script's own `torch.manual_seed` calls)."""

from __future__ import annotations

import os
import sys
from typing import Any

from ._record import OpRecorder
from ._store import load_init, load_record, save_record


def recorder_for(folder: str, *, steps: int = 3, stop: bool = False, init_dir: str | None = None,
                 seeds_dir: str | None = None, seed: int | None = None) -> OpRecorder:
    """The recorder that writes `folder`; raises ValueError (one line) on a bad reference."""
    init = load_init(init_dir) if init_dir else None
    seeds = [s["used"] for s in load_record(seeds_dir)["seeds"]] if seeds_dir else None

    def done(recorder: OpRecorder) -> None:
        save_record(folder, recorder.record, recorder.init_state)
        if stop:
            # the steps asked for are recorded: this side's process has nothing more to do
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(0)

    return OpRecorder(steps, init=init, seeds=seeds, seed=seed, on_done=done)


def side_argv(folder: str, target: list[str], *, steps: int, seed: int | None, reference: str | None) -> list[str]:
    """The `python -m torchtriage run ...` command line of one side (`target`: SCRIPT ARGS or
    -m MODULE ARGS)."""
    argv = [sys.executable, "-m", "torchtriage", "run", "--quiet", "--record", folder, "--record-steps",
            str(steps), "--record-stop", "--record-only"]
    if seed is not None:
        argv += ["--record-seed", str(seed)]
    if reference is not None:
        argv += ["--record-init", reference, "--record-seeds", reference]
    return argv + target


def add_record_options(p: Any) -> None:
    """`run`'s options for recording (the hidden ones are for `diff`'s sides)."""
    import argparse

    p.add_argument("--record", metavar="DIR", help="record the first steps op by op into DIR (a reference "
                                                   "run for `torchtriage diff`)")
    p.add_argument("--record-steps", type=int, default=3, metavar="N", help="steps to record (default 3)")
    for flag in ("--record-stop", "--record-only"):
        p.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    for flag in ("--record-init", "--record-seeds", "--record-seed"):
        p.add_argument(flag, help=argparse.SUPPRESS)
