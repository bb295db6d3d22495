"""What this rank is doing, for the stall watchdog: the collective it entered last (with the
user's line), when it last made progress, and the order of the collectives it called.

`Tracker` is written by the main thread (cheap attribute stores; a collective is never in a
per-tensor hot path) and read by the watchdog thread. `wrap_collectives` patches the public
`torch.distributed` functions users call (`dist.all_reduce`, `dist.barrier`, ...): library code
that calls `distributed_c10d` directly is not seen, DDP's own gradient all-reduce is marked by
the session's backward instead (`Tracker.enter("backward", ...)`).
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

from .._frames import UserFrame, user_frame_from_stack
from .._patching import Patches
from ._rereduce import Rereduce

COLLECTIVES = (
    "all_reduce", "all_reduce_coalesced", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
    "all_gather_object", "gather", "gather_object", "scatter", "scatter_object_list", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast_object_list", "barrier",
    "monitored_barrier", "send", "recv", "send_object_list", "recv_object_list",
)
MAX_SEQUENCE = 2000  # call sites kept in order, to compare the ranks' sequences


class Tracker:
    def __init__(self) -> None:
        self.pending: tuple[str, UserFrame | None, float, int] | None = None  # op, line, since, step
        self.last_progress = time.time()
        self.step = 0
        self.sites: dict[tuple[str, str, int], int] = {}  # (op, file, line) -> id
        self.sequence: list[int] = []
        self.total = 0
        self.counts: dict[int, int] = {}
        self.step_ops: list[str] = []  # explicit collectives of the current step (repro bundles)
        self.rereduce = Rereduce()  # a sum over the ranks reduced again (`_rereduce.py`)
        self._depth = 0

    def progress(self) -> None:
        self.last_progress = time.time()

    def enter(self, op: str, frame: UserFrame | None, *, record: bool = True) -> None:
        self._depth += 1
        if self._depth > 1:
            return  # a collective called by another one (all_gather_object -> all_gather)
        self.last_progress = time.time()
        self.pending = (op, frame, time.time(), self.step)
        if record:
            key = (op, frame.file if frame else "", frame.line if frame else 0)
            site = self.sites.get(key)
            if site is None:
                site = self.sites[key] = len(self.sites)
            self.total += 1
            self.counts[site] = self.counts.get(site, 0) + 1
            if len(self.sequence) < MAX_SEQUENCE:
                self.sequence.append(site)
            if op != "backward" and len(self.step_ops) < 64:
                where = f" at {os.path.basename(frame.file)}:{frame.line}" if frame else ""
                self.step_ops.append(f"{op}{where}")

    @property
    def outermost(self) -> bool:
        """The collective running now is the user's own call, not one called by another."""
        return self._depth == 1

    def leave(self) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth == 0:
            self.pending = None
            self.last_progress = time.time()

    def summary(self) -> dict[str, Any]:
        """JSON-able record of the collectives called (for the merged report's comparisons)."""
        sites = {str(i): [op, f, line] for (op, f, line), i in self.sites.items()}
        return {"sites": sites, "sequence": self.sequence, "total": self.total,
                "counts": {str(k): v for k, v in self.counts.items()}}

    def pending_dict(self) -> dict[str, Any] | None:
        p = self.pending
        if p is None:
            return None
        op, frame, since, step = p
        return {"op": op, "file": frame.file if frame else None, "line": frame.line if frame else None,
                "source": frame.source if frame else "", "since": since, "step": step}


def wrap_collectives(tracker: Tracker, dist: Any, patches: Patches) -> None:
    """Patch `dist.<collective>` with a recording wrapper (undone by `patches.restore_all()`)."""
    for name in COLLECTIVES:
        fn = getattr(dist, name, None)
        if fn is None or getattr(fn, "__torchtriage_wrapped__", False):
            continue
        patches.patch(dist, name, _wrap(tracker, name, fn))


def _wrap(tracker: Tracker, name: str, fn: Any) -> Any:
    label = f"{name}()"

    @functools.wraps(fn)
    def collective(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        frame = user_frame_from_stack(2)
        tracker.enter(label, frame)
        try:
            if name == "all_reduce" and tracker.outermost:
                return tracker.rereduce.call(fn, args, kwargs, frame)
            return fn(*args, **kwargs)
        finally:
            tracker.leave()

    collective.__torchtriage_wrapped__ = True  # type: ignore[attr-defined]
    return collective
