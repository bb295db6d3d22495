"""The ledger's records: one `Loader` per loop over a loader (its identity across epochs), one
`Epoch` per pass of an iterator over it.

A `Loader` is keyed by the line that iterates it and the dataset it reads from (the root of its
`Subset` chain), so a loader built anew each epoch is still one loader. Per loader it keeps:

* per epoch: the batches and samples yielded, for each batch the activity that followed it
  until the next batch (backward passes, forwards with gradients), and a hash of the order;
* over the run: a bit per root index of the samples yielded, and of those whose batch reached
  a backward (one byte per root sample, kept on the host: the sampler's indices are there);
* the content digests of the first epoch's per-sample tensors (int64 per row, on the batch's
  device, read once at the end), for loaders whose samples have no index into a shared source.
"""

from __future__ import annotations

import dataclasses
import hashlib
import statistics
from typing import Any

import numpy as np
import torch

from .._frames import UserFrame

MAX_KEYS = 1 << 20  # content digests kept per loader (8 MiB)


@dataclasses.dataclass(eq=False)
class Epoch:
    number: int
    shuffled: bool
    sampler_epoch: int | None  # DistributedSampler.epoch when this pass began
    outer_epoch: int | None = None  # the loader's sampler's epoch (any sampler with set_epoch)
    inner_epochs: tuple[tuple[str, int], ...] = ()  # samplers it wraps that follow set_epoch (`_epochwrap`)
    sampler_cls: type | None = None  # the loader's sampler's class, when it wraps such a sampler
    sizes: list[int] = dataclasses.field(default_factory=list)  # samples per batch
    roots: list[np.ndarray | None] = dataclasses.field(default_factory=list)  # root indices per batch
    backwards: list[int] = dataclasses.field(default_factory=list)  # per batch: backwards until the next batch
    forwards: list[int] = dataclasses.field(default_factory=list)  # per batch: forwards with gradients
    mark: tuple[int, int] = (0, 0)  # the counters when the last batch was yielded
    calls: int = 0  # root forwards of any kind when the last batch was yielded
    grad: bool = True  # grad mode when the last batch was yielded (a partner batch is fetched alike)
    order: Any = dataclasses.field(default_factory=hashlib.blake2b)
    complete: bool = False  # the sampler was exhausted (StopIteration)
    stop: tuple[int, int] | None = None  # the counters at StopIteration
    expected: int | None = None  # len(the iterator): the batches the sampler will deliver
    promised: int | None = None  # the samples the sampler will deliver (`_passes.promised`)
    closed: bool = False

    @property
    def batches(self) -> int:
        return len(self.sizes)

    @property
    def samples(self) -> int:
        return sum(self.sizes)

    def trained(self) -> list[bool]:
        """Per batch: whether it reached a backward. A batch is active when a backward or a
        forward with gradients followed it before the next one; a prefetching loop (one batch
        fetched ahead: Lightning, accelerate) shifts activity by one batch, and a loop with
        several backward passes per batch (a GAN) has more, so the count of batches trained is
        also estimated from the backwards: their number over the usual number per active batch."""
        active = [b > 0 or f > 0 for b, f in zip(self.backwards, self.forwards)]
        _fed_in_groups(active, self.forwards)
        total = sum(self.backwards)
        if not total:
            return [False] * len(active)
        per = statistics.median_low([b for b in self.backwards if b > 0] or [1])
        if len(active) >= 2 and not active[0]:
            # Fetched one ahead: batch i's work is in window i + 1, the last two batches' in the
            # last window (after the sampler ran out).
            inner = [b for b in self.backwards[1:-1] if b > 0]  # (the last window holds two batches' work)
            per = statistics.median_low(inner) if inner else max(1, self.backwards[-1] // 2)
            active = [*active[1:], self.backwards[-1] >= 2 * per]
        estimate = min(len(active), round(total / max(per, 1)))
        missing = estimate - sum(active)
        if missing > 0:  # shifted activity: count the inactive batches as trained, first ones first
            for i, a in enumerate(active):
                if not a and missing > 0:
                    active[i], missing = True, missing - 1
        return active


def _fed_in_groups(active: list[bool], forwards: list[int]) -> None:
    """Batches fetched in a group before their work (the HF Trainer fetches a gradient-
    accumulation cycle's batches at once, then runs one forward per batch): a window whose
    training forwards number the inactive batches just before it plus its own (or just them,
    when the loader also fetches one batch ahead: accelerate) fed each of them. A loop that
    skips batches runs its usual forward for the one it keeps. In place."""
    run = 0
    for i, a in enumerate(active):
        if not a:
            run += 1
            continue
        # (the last window, after the sampler ran out, also holds the batch fetched ahead's work)
        low = forwards[i] - (2 if i == len(active) - 1 else 1)
        if run and forwards[i] >= 2 and low <= run <= forwards[i]:
            active[i - run:i] = [True] * run
        run = 0


@dataclasses.dataclass(eq=False)
class Loader:
    """One loader of the user's (see the module docstring)."""

    name: str
    frame: UserFrame | None  # the loop over it (or where it was made)
    made: UserFrame | None  # where the DataLoader was made, when seen
    root_token: int  # the root dataset's token: equal for loaders over one dataset (0: none)
    n: int  # len(root) (0: unknown)
    sampler: str
    distributed: bool
    size: int = 0  # len(the loader's own dataset) (0: unknown)
    epochs: list[Epoch] = dataclasses.field(default_factory=list)
    seen: np.ndarray | None = None  # per root index: yielded
    trained_on: np.ndarray | None = None  # per root index: its batch reached a backward
    keys: list[torch.Tensor] = dataclasses.field(default_factory=list)
    kept: int = 0
    row_shape: tuple[int, ...] | None = None
    ragged: bool = False  # rows of several shapes (padded per batch): the same sample hashes differently
    whole: bool = True  # iterates its root dataset itself (no Subset in between)
    chain: tuple[int, ...] = ()  # tokens of the datasets from the loader's own down to the root
    models: set[int] = dataclasses.field(default_factory=set)  # tokens of the models its batches fed
    summaries: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # closed epochs
    first: dict[str, Any] = dataclasses.field(default_factory=dict)  # the first training epoch's samples
    columns: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # group-like columns of the root
    groups: dict[str, dict[Any, int]] = dataclasses.field(default_factory=dict)  # key -> value -> samples
    # axis -> (rows, positions) digests of the slices of its float windows (`_windows.py`)
    slices: dict[int, list[torch.Tensor]] = dataclasses.field(default_factory=dict)
    weights: int = 0  # len(the sampler's per-sample weight vector) (0: none; `_weights.py`)
    weights_made: UserFrame | None = None  # where that sampler was made
    moments: dict[str, Any] | None = None  # its in-memory samples' distinct slices, summarized (`_scaling.py`)
    stored: dict[str, Any] | None = None  # its raw rows' moments and the per-feature vectors it holds (`_scaling.py`)

    @property
    def trains(self) -> bool:
        return any(s["trained_batches"] for s in self.summaries)

    def where(self) -> str:
        f = self.made or self.frame
        return f"{f.file}:{f.line}" if f else "?"

