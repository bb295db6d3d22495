"""A sharded evaluation pass reaches the other ranks (issue 26, session 8).

An evaluation loader with a DistributedSampler gives each rank 1/world of the evaluation set.
Whatever the pass measures on a rank (an accuracy, a loss, a best-checkpoint decision) is a
measure of that share only, until the ranks combine it: an all_reduce of the sums and counts, an
all_gather of the predictions, a gather to rank 0 (torchmetrics, accelerate's
`gather_for_metrics`, Lightning's `sync_dist` all call one of these). A pass after which this
rank called none of them before training went on (its next training forward or backward) or the
run ended left the metric a share's.

Measured per rank, from the data ledger's loader stream: the pass's samples against the
evaluation set's size, and the reducing collectives called between the pass's first batch and
the next training forward (the `distributed` check's tracker counts the `torch.distributed`
calls, per call site). A pass that reached a backward is a training pass, not judged; a rank
with no `distributed` check (a single process) judges nothing. Severity follows the harm rule of
`data.eval_lost` (`_passes.py`): a warning when at least half of the evaluation set never reached
this rank's metric over the run's passes (a fixed shard: `shuffle=False`, or `set_epoch` never
called on the evaluation sampler); `info` when the shard changes from pass to pass and most of the
set reached the metric over the passes (a shuffled DistributedSampler with `set_epoch`: each pass's
number is an unbiased estimate from a random part of the set, with `passes` and
`never_evaluated` as evidence). One finding per loader, from its first unreduced pass.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._finding import from_catalogue
from .._frames import UserFrame, user_frame_from_stack
from .._loaderstream import as_rows

# collectives that combine the ranks' values (barrier, broadcast, send/recv do not)
REDUCING = ("all_reduce", "all_reduce_coalesced", "reduce", "all_gather", "all_gather_into_tensor",
            "all_gather_object", "gather", "gather_object", "reduce_scatter", "reduce_scatter_tensor",
            "all_to_all", "all_to_all_single")


class _Pass:
    def __init__(self, loader: Any, made: UserFrame | None, loop: UserFrame | None, counts: dict[int, int],
                 backwards: int, world: int) -> None:
        self.made, self.loop = made, loop
        self.counts = counts
        self.backwards = backwards
        self.samples = 0
        self.batches = 0
        self.seen: np.ndarray | None = None  # per sample of loader.dataset: in this rank's pass
        self.stopped = False
        self.world = world
        try:
            self.size = int(len(loader.dataset))
        except TypeError:
            self.size = 0
        self.sampler = type(getattr(loader, "sampler", None)).__name__


class EvalSync:
    """Listener of the loader stream (`_loaderstream.py`) and of the ledger's counters."""

    def __init__(self, session: Any, ledger: Any) -> None:
        self.session = session
        self.ledger = ledger
        self.open: dict[int, _Pass] = {}  # id(iterator) -> its pass (until judged)
        self.made: dict[int, UserFrame | None] = {}
        self.judged: dict[tuple[str, int], tuple[_Pass, list[Any]]] = {}  # first pass, [union, passes]
        self.found: list[Any] = []
        self.world = 0

    def _tracker(self) -> Any:
        check = self.session.checker("distributed")
        info = getattr(check, "info", None)
        if check is None or info is None:
            return None
        self.world = int(info.world_size)
        return getattr(check, "tracker", None)

    def _reducing(self, tracker: Any) -> dict[int, int]:
        ops = {i for (op, _, _), i in tracker.sites.items() if op.rstrip("()") in REDUCING}
        return {i: n for i, n in tracker.counts.items() if i in ops}

    # ------------------------------------------------------------------ the stream's events
    def on_made(self, loader: Any) -> None:
        self.made[id(loader)] = user_frame_from_stack(2)

    def on_begin(self, it: Any, loader: Any) -> None:
        from torch.utils.data.distributed import DistributedSampler

        sampler = getattr(loader, "sampler", None)
        if not isinstance(sampler, DistributedSampler) or getattr(sampler, "num_replicas", 1) < 2:
            return
        tracker = self._tracker()
        if tracker is None:
            return
        old = self.open.pop(id(it), None)
        if old is not None:
            self._close(old, tracker)
        self.open[id(it)] = _Pass(loader, self.made.get(id(loader)), user_frame_from_stack(2),
                                  self._reducing(tracker), self.ledger.counters()[0], self.world)

    def on_batch(self, it: Any, indices: Any, data: Any) -> None:
        p = self.open.get(id(it))
        if p is not None:
            p.batches += 1
            try:
                p.samples += len(indices) if indices is not None else 0
            except TypeError:
                pass
            rows = as_rows(indices)
            if rows is not None and p.size and (not rows.size or rows.max() < p.size):
                if p.seen is None:
                    p.seen = np.zeros(p.size, dtype=bool)
                p.seen[rows] = True

    def on_stop(self, it: Any) -> None:
        p = self.open.get(id(it))
        if p is not None:
            p.stopped = True

    # ------------------------------------------------------------------ the ledger's events
    def training(self) -> None:
        """A training forward or a backward: the passes that ended before it are judged."""
        if not self.open:
            return
        tracker = self._tracker()
        for key, p in list(self.open.items()):
            if p.stopped:
                del self.open[key]
                if tracker is not None:
                    self._close(p, tracker)

    def end(self) -> list[Any]:
        tracker = self._tracker()
        for p in self.open.values():
            if p.stopped and tracker is not None:
                self._close(p, tracker)
        self.open.clear()
        for p, (union, passes) in self.judged.values():
            self._finding(p, union, passes)
        self.judged.clear()
        return self.found

    def _close(self, p: _Pass, tracker: Any) -> None:
        if not p.stopped or self.ledger.counters()[0] > p.backwards or not p.samples or not p.size:
            return  # cut short, or a training pass
        now = self._reducing(tracker)
        if any(now.get(i, 0) > p.counts.get(i, 0) for i in now):
            return  # the ranks' values were combined
        frame = p.made or p.loop
        key = (frame.file, frame.line) if frame is not None else ("?", 0)
        if key in self.judged:
            first, state = self.judged[key]
            if state[0] is not None and p.seen is not None and p.seen.shape == state[0].shape:
                state[0] |= p.seen
            else:
                state[0] = None  # (a pass without indices: coverage over the passes unknown)
            state[1] += 1
            return
        self.judged[key] = (p, [p.seen.copy() if p.seen is not None else None, 1])

    def _finding(self, p: _Pass, union: np.ndarray | None, passes: int) -> None:
        frame = p.made or p.loop
        share = p.samples / p.size
        never = p.size - int(union.sum()) if union is not None else None
        # the harm rule of data.eval_lost: at least half of the set never reached this rank's metric
        harmful = never is None or never >= 0.5 * p.size
        where = f"{frame.file}:{frame.line}" if frame is not None else "?"
        fields = {"samples": p.samples, "size": p.size, "share": f"{100 * share:.0f}", "world": p.world,
                  "where": where, "sampler": p.sampler}
        evidence = {"loader_at": where, "sampler": p.sampler, "world_size": p.world, "samples_this_rank": p.samples,
                    "evaluation_set": p.size, "share_of_set": round(share, 4), "batches": p.batches,
                    "reducing_collectives_after_pass": 0, "passes": passes, "never_evaluated": never,
                    "loop_line": f"{p.loop.file}:{p.loop.line}" if p.loop is not None else None}
        self.found.append(from_catalogue("distributed", "distributed.eval_not_reduced", "evalsync.not_reduced",
                                         fields=fields, cause_key="evalsync.not_reduced.cause",
                                         next_key="evalsync.not_reduced.next", frame=frame, evidence=evidence,
                                         severity="warning" if harmful else "info", stage="data",
                                         source_line=True))
