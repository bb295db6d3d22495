"""`DistributedChecker`: the session's check in a process that is one rank of several.

Added by the registry only when `_env.active()` (torchrun's environment, or an initialized
process group): a single process never builds it. It stamps every finding with the rank,
watches DDP models (`_ddp.py`), records collectives (`_collectives.py`), runs the stall
watchdog (`_watchdog.py`), and at the end gathers the ranks' reports into one (`_merge.py`).
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, Callable

import torch
import torch.nn as nn

from .. import _deferred
from .._checker import Checker
from .._findings import Category, Finding, Report, Severity, Stage, from_catalogue
from .._frames import user_frame_from_stack
from .._patching import Patches
from ._collectives import Tracker, wrap_collectives
from ._ddp import DDPWatch, find_unused_idle, is_ddp, received_finding, replayable, unused_finding
from ._env import RankInfo, rank_info, run_dir
from ._merge import merge
from ._rundir import RunDir, open_rundir
from ._shards import is_dtensor, is_sharded
from ._watchdog import ENDED_GRACE, MERGE_WAIT, STALL_EXIT_CODE, Watchdog

END_GRACE = 15.0  # seconds rank 0 waits for the other ranks' reports beyond their stall timeout


class DistributedChecker(Checker):
    """Rank-aware reporting, DDP checks and the stall watchdog (issue 15)."""

    name = "distributed"

    def __init__(self) -> None:
        super().__init__()
        self.info: RankInfo | None = None
        self.tracker = Tracker()
        self.rundir: RunDir | None = None
        self.watchdog: Watchdog | None = None
        self._patches = Patches()
        self._ddp: list[DDPWatch] = []
        self._flags = _deferred.DeferredFlags()
        self._local: list[float] = []
        self._step_t0 = time.time()
        self.slowest_step = 0.0
        self._fingerprints: dict[str, float] = {}
        self._fingerprinted: set[int] = set()
        self._fsdp = False
        self._no_replay = False  # a model one rank cannot replay alone (FSDP, Lightning's DDP)
        self._gathered: Report | None = None
        self.stalling = False  # set by the watchdog once a stall is declared
        self.final_report: Report | None = None  # this rank's report, handed in at the end
        self.writer: Callable[[Report], None] | None = None

    # ------------------------------------------------------------------ lifecycle
    def on_start(self, session: Any) -> None:
        self.info = rank_info()
        if self.info is None or self.info.world_size < 2:
            self.info = None  # a process group of one (a bundle's replay): nothing to gather
            return
        session.rank_fields.update(rank=self.info.rank, local_rank=self.info.local_rank)
        session.meta.update(rank=self.info.rank, world_size=self.info.world_size)
        # read by the repro recorder: a bundle says which rank it is and what the step needed
        session.meta["distributed"] = {"rank": self.info.rank, "world_size": self.info.world_size,
                                       "ddp": False, "step_collectives": self.tracker.step_ops}
        self.rundir = open_rundir(run_dir(self.info.rank), self.info.rank, self.info.world_size)
        wrap_collectives(self.tracker, torch.distributed, self._patches)
        timeout = session.options.get("stall_timeout")
        self.writer = session.options.get("report_writer")
        self.watchdog = Watchdog(self, timeout=timeout)
        self.watchdog.register_dump()
        self.watchdog.heartbeat()  # now: the thread may never run if the interpreter blocks
        self.watchdog.start()

    def on_model(self, model: nn.Module, label: str) -> None:
        if self.info is None:
            return
        if is_ddp(model):
            self._ddp.append(DDPWatch(model, self._flags, self.tracker))
            if not replayable(model):
                self._no_replay = True
            assert self.session is not None
            self.session.meta["distributed"]["ddp"] = True
        if is_sharded(model) and not self._fsdp:
            # FSDP swaps sharded and gathered parameters around each forward and backward:
            # the gradient chain check cannot judge them (it would report them as cut).
            self._fsdp = True
            assert self.session is not None
            self.session.disable_check("gradients")
            self.session.add(_fsdp_info(label))
        if id(model) not in self._fingerprinted:
            # before its first forward (buffers such as BatchNorm's change in it, per rank)
            self._fingerprinted.add(id(model))
            self._fingerprint(model, label)

    def on_step_begin(self, step: int) -> None:
        self._local = []
        self.tracker.step_ops.clear()

    def on_root_forward(self, model: nn.Module, label: str, args: tuple[Any, ...],
                        kwargs: dict[str, Any], output: Any) -> None:
        self.tracker.progress()
        for w in self._ddp:
            if w.ddp is model:
                w.forward_seen()

    def on_backward(self, roots: tuple[torch.Tensor, ...], grads: Any) -> None:
        if any(w.sync_expected for w in self._ddp):
            self.tracker.enter("backward", user_frame_from_stack(2))

    def on_backward_end(self, roots: tuple[torch.Tensor, ...]) -> None:
        if self.tracker.pending is not None and self.tracker.pending[0] == "backward":
            self.tracker.leave()
        assert self.session is not None
        for w in self._ddp:
            unused = w.backward_done(self._on_local)
            if unused and w.checks_unused:
                self.session.add(unused_finding(unused, self.session.step,
                                                     self.session.model_label(w.ddp) or "model"))
        if self._flags:
            _deferred.ride(self.session, self._flags)

    def on_step_end(self, step: int) -> None:
        now = time.time()
        self.slowest_step = max(self.slowest_step, now - self._step_t0)
        self._step_t0 = now
        self.tracker.step = step + 1
        self.tracker.progress()
        self._flags.resolve()

    def on_exception(self, exc: BaseException) -> None:
        self.tracker.pending = None

    def on_end(self) -> None:
        assert self.session is not None
        for w in self._ddp:
            if not w.checks_unused and getattr(w.ddp, "find_unused_parameters", False) \
                    and not w.ever_unused and w.steps_checked:
                self.session.add(find_unused_idle(w.steps_checked, self.session.model_label(w.ddp) or "model"))
            w.remove()
        self._ddp.clear()
        if self.info is not None:
            for f in self.tracker.rereduce.findings(self.info.world_size):
                self.session.add(f)
        self._flags.clear()
        _deferred.leave(self.session, self._flags)
        self._patches.restore_all()
        if self.watchdog is not None:
            # The watchdog keeps running until the merged report is out: a peer may still
            # stall against this rank, which has ended.
            self.watchdog.ended = self._ending()
            if not self.stalling:
                self.watchdog.heartbeat()

    # ------------------------------------------------------------------ the sentinel asks
    def _on_local(self, values: list[float]) -> None:
        self._local.extend(values)

    def received_nonfinite(self, step: int) -> Finding | None:
        """For the non-finite sentinel, when the reduced gradients of `step` are non-finite:
        an info finding when this rank's own (local) gradients were all finite — the value came
        through DDP's all-reduce from another rank — else None (this rank made it)."""
        if not self._ddp:
            return None
        for w in self._ddp:
            w.pending_sums(self._on_local)
        self._flags.resolve()
        local = self._local
        if not local or not all(math.isfinite(v) for v in local):
            return None
        return received_finding(step, local)

    def sharded_nonfinite(self, trip: str, step: int, loss: float | None) -> Finding | None:
        """For the sentinel, with an FSDP model: the finding without a replay (replaying a sharded
        model on one rank would wait for the others' all-gathers). None without FSDP."""
        if not (self._fsdp or self._no_replay):
            return None
        if trip == "backward" and self._ddp:
            received = self.received_nonfinite(step)
            if received is not None:
                return received
        elif trip == "backward" and loss is not None and math.isfinite(loss):
            # this rank's loss was finite: the gradients came non-finite out of the reduce-scatter
            # (the merged report names the rank whose own loss or forward was not finite)
            f = received_finding(step, [])
            return f.replace(evidence={"this rank's loss": loss})
        return from_catalogue(Category.NUMERICAL, "distributed.nonfinite_sharded", "dist.sharded",
                              fields={"stage": trip, "step": step}, cause_key="dist.cause.sharded",
                              next_key="dist.next.sharded", evidence={"loss": loss}, severity=Severity.ERROR,
                              stage=Stage(trip), step=step)

    # ------------------------------------------------------------------ evidence at the start
    def _fingerprint(self, model: nn.Module, label: str) -> None:
        """One number per parameter and buffer at the first forward (read with the step's one
        read); the merged report compares the ranks' numbers."""
        # DDP with broadcast_buffers=True (its default) copies rank 0's buffers into every rank
        # at each forward: buffers that differ before it are made equal, not a fault
        buffers = () if is_ddp(model) and getattr(model, "broadcast_buffers", False) else tuple(model.named_buffers())
        named = [(f"{label}.{n}", t) for n, t in (*model.named_parameters(), *buffers)
                 if t.is_floating_point() and t.numel() and not is_dtensor(t)]  # shards differ by design
        if not named or len(named) > 4096:
            return
        names = [n for n, _ in named]
        with torch.no_grad():
            sums = [t.detach().double().sum() + (t.detach().double().abs() * 1e-3).sum() for _, t in named]

        def keep(values: list[float]) -> None:
            self._fingerprints.update(zip(names, values))

        self._flags.add(sums, keep)
        assert self.session is not None
        _deferred.ride(self.session, self._flags)

    # ------------------------------------------------------------------ the end
    def _ending(self) -> dict[str, Any]:
        assert self.session is not None
        exc = self.session.exception
        if exc is None:
            return {"how": "ok"}
        return {"how": "error", "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]}

    def record(self, report: Report, **extra: Any) -> dict[str, Any]:
        """What this rank contributes to the merged report."""
        assert self.info is not None
        return {"rank": self.info.rank, "local_rank": self.info.local_rank, "host": self.info.host,
                "report": report.to_dict(), "collectives": self.tracker.summary(),
                "fingerprints": self._fingerprints, "ended": self._ending(), **extra}

    def gather(self, report: Report) -> Report | None:
        """At the end of this rank's run: hand in its report; on rank 0, wait for the others'
        (their reports, or their stall dumps) and return the merged report; None elsewhere."""
        if self._gathered is not None:
            return self._gathered
        if self.info is None or self.rundir is None:
            return report
        self._wait_if_stalling()  # a peer's exit broke this rank's collective during a stall
        self.final_report = report
        rd = self.rundir
        rd.write(f"report-{self.info.rank}.json", self.record(report))
        if self.info.rank != 0:
            # Wait for rank 0's merged report: a rank that exits with an error first makes
            # torchrun stop the others, rank 0 among them, before it has written the report.
            got = rd.wait(["done.json"], ENDED_GRACE + MERGE_WAIT + 5.0)
            self._wait_if_stalling()
            self._finish()
            if got:
                rd.clear_own()
                rd.wait_gone("done.json", 3.0)
            return None
        timeout = (self.watchdog.timeout() if self.watchdog else 60.0) + END_GRACE
        records = self._collect(timeout)
        self._wait_if_stalling()
        merged = merge(records, self.info.world_size)
        self._gathered = merged
        rd.write("done.json", {"rank": 0})
        self._finish()
        if len(records) == self.info.world_size:
            # every rank answered: nobody reads the folder once they have seen done.json
            # (they poll every 50 ms and wait for its removal before they exit)
            time.sleep(0.3)
            rd.clear()
        return merged

    def _wait_if_stalling(self) -> None:
        """A stall was declared (a peer's exit may have broken this rank's collective, and
        the script ended): the watchdog writes the merged report and ends the process."""
        if self.stalling:
            deadline = time.monotonic() + 60.0
            while time.monotonic() < deadline:
                time.sleep(0.1)

    def _finish(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()

    def _collect(self, timeout: float) -> dict[int, dict[str, Any]]:
        assert self.rundir is not None and self.info is not None
        rd = self.rundir
        got: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        while True:
            for r in range(self.info.world_size):
                if r in got:
                    continue
                data = rd.read(f"report-{r}.json") or rd.read(f"dump-{r}.json")
                if data is not None:
                    got[r] = data
            if len(got) == self.info.world_size or time.monotonic() >= deadline or self.stalling:
                return got
            time.sleep(0.05)

    def stall_exit(self, report: Report) -> None:
        """Rank 0 during a stall: the merged report out through the writer, then the exit."""
        writer = self.writer or _print_report
        try:
            writer(report)
        finally:
            from .._catalogue import msg

            print(msg("dist.stall_exit", code=STALL_EXIT_CODE), file=sys.stderr)
            sys.stderr.flush()
            sys.stdout.flush()


def _fsdp_info(label: str) -> Finding:
    return from_catalogue(Category.DISTRIBUTED, "distributed.fsdp_limits", "dist.fsdp", fields={"model": label},
                          cause_key="dist.cause.fsdp", next_key="dist.next.fsdp", severity=Severity.INFO)


def _print_report(report: Report) -> None:
    from ..report import render_text

    print(render_text(report), file=sys.stderr)
