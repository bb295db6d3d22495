"""DataLoader workers produce different samples: no worker repeats what another one made.

With `num_workers=w` (and `in_order`, the default) a DataLoader hands batch k to worker k mod w,
so batches g*w .. g*w + w - 1 are each worker's g-th batch. Each worker holds a copy of the
dataset: a random generator the dataset holds (`np.random.default_rng(seed)` in `__init__`, a
`random.Random`, a `torch.Generator`) is copied into every worker in the same state. PyTorch
reseeds torch's, `random`'s and numpy's global generators per worker, not those. Every worker
then draws the same numbers, and samples made from them alone repeat, worker for worker; an
`IterableDataset` that every worker iterates in full does the same. The epoch trains on 1/w of
the samples it delivers.

Measured, not inferred from the pattern: in a loader's first pass (up to `MOST_BATCHES`
batches), each batch's per-sample tensor is digested on its device (`dense_keys`, as the
ledger's own content digests), read once at the end. A row equal to the row at the same position
of another worker's batch of the same round, for another index, is a repeat. A warning when the
repeats are at least `SHARE` of the rows compared and at least `MIN_ROWS`: exact equality at the
same position across workers does not happen by chance. Rows that repeat inside their own batch
(constant or synthetic filler data) are left out. The dataset's generators (found by a walk of
its attributes) are named as the cause. Not seen: repeated random draws that are combined with
per-index data (an augmentation of distinct images), which leave no equal rows.
"""

from __future__ import annotations

import dataclasses
import random
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._frames import UserFrame
from .._leakage._runtime._fingerprint import dense_keys
from .._loaderstream import as_rows
from .._loaderstream import tensors as batch_tensors
from ._make import finding

if TYPE_CHECKING:
    from ._checker import DataLedger

MOST_BATCHES = 64  # batches digested per loader's first pass
MOST_LOADERS = 16
SHARE = 0.1
MIN_ROWS = 8
DISTINCT = 0.9  # a batch whose rows are less distinct than this holds filler: not compared


@dataclasses.dataclass(eq=False)
class _Watch:
    name: str
    made: UserFrame | None
    workers: int
    generators: list[str]
    keys: list[torch.Tensor] = dataclasses.field(default_factory=list)
    rows: list[np.ndarray | None] = dataclasses.field(default_factory=list)


class Workers:
    """A listener of the loader stream: the first pass of each loader with two or more workers."""

    def __init__(self, ledger: DataLedger) -> None:
        self.ledger = ledger
        self.watching: weakref.WeakKeyDictionary[Any, _Watch] = weakref.WeakKeyDictionary()
        self.loaders: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        self.done: list[_Watch] = []

    def on_begin(self, it: Any, loader: Any) -> None:
        workers = getattr(loader, "num_workers", 0) or 0
        if workers < 2 or getattr(loader, "in_order", True) is False or len(self.done) >= MOST_LOADERS:
            return
        try:
            if loader in self.loaders:
                return  # its first pass only
            self.loaders[loader] = True
        except TypeError:
            return
        made = self.ledger.follower.made.get(loader)
        from ._lines import assigned_name

        name = (assigned_name(made.source) if made else None) or type(loader).__name__
        w = _Watch(name, made, int(workers), generators(getattr(loader, "dataset", None)))
        self.watching[it] = w
        self.done.append(w)

    def on_batch(self, it: Any, indices: Any, data: Any) -> None:
        w = self.watching.get(it)
        if w is None or len(w.keys) >= MOST_BATCHES:
            return
        tensors = batch_tensors(data)
        t = next((t for t in tensors if t.dim() >= 2 and not t.is_complex()), None)
        if t is None:
            w.keys.append(torch.empty(0, dtype=torch.int64))
        else:
            with torch.no_grad():
                w.keys.append(dense_keys(t))
        w.rows.append(as_rows(indices))


def generators(dataset: Any, depth: int = 2) -> list[str]:
    """The random generators a dataset holds (attribute paths, two levels down, through Subsets)."""
    from torch.utils.data import Subset

    for _ in range(16):
        if not isinstance(dataset, Subset):
            break
        dataset = dataset.dataset
    out: list[str] = []
    seen: set[int] = set()

    def walk(obj: Any, prefix: str, level: int) -> None:
        if id(obj) in seen or len(out) >= 8:
            return
        seen.add(id(obj))
        try:
            attrs = vars(obj)
        except TypeError:
            return
        for name, value in list(attrs.items())[:64]:
            if isinstance(value, (np.random.Generator, np.random.RandomState, random.Random, torch.Generator)):
                out.append(f"{prefix}{name} ({(type(value).__module__ or '').split('.')[0]}.{type(value).__name__})")
            elif level < depth and not isinstance(value, (type, torch.Tensor, np.ndarray, torch.nn.Module)) \
                    and not (type(value).__module__ or "").startswith(("builtins", "torch", "numpy", "pandas")):
                walk(value, f"{prefix}{name}.", level + 1)

    walk(dataset, "dataset.", 0)
    return out


def judge(ledger: DataLedger, found: Workers) -> list[Any]:
    watched = [w for w in found.done if len(w.keys) >= 2]
    if not watched:
        return []
    flat = [k for w in watched for k in w.keys]
    sizes = [int(k.numel()) for k in flat]
    if not sum(sizes):
        return []
    values = torch.cat([k.reshape(-1).to("cpu", non_blocking=False) for k in flat]).numpy()  # the one read
    out = []
    at = 0
    for w in watched:
        keys = []
        for k in w.keys:
            n = int(k.numel())
            keys.append(values[at:at + n])
            at += n
        f = _verdict(w, keys)
        if f is not None:
            out.append(f)
    return out


def _verdict(w: _Watch, keys: list[np.ndarray]) -> Any:
    compared = repeated = 0
    example: dict[str, Any] | None = None
    for g in range(0, len(keys), w.workers):
        group = list(range(g, min(g + w.workers, len(keys))))
        for pos, k in enumerate(group):
            kk = keys[k]
            if not kk.size or np.unique(kk).size < DISTINCT * kk.size:
                continue
            compared += kk.size
            same = np.zeros(kk.size, dtype=bool)
            for j in group[:pos]:
                kj = keys[j]
                if kj.size != kk.size:
                    continue
                eq = kj == kk
                rj, rk = w.rows[j], w.rows[k]
                if rj is not None and rk is not None and rj.size == rk.size:
                    eq &= rj != rk  # the same index twice is the sampler's doing, not the workers'
                if eq.any() and example is None:
                    p = int(np.flatnonzero(eq)[0])
                    example = {"batch": k, "worker": k % w.workers, "same_as_batch": j,
                               "same_as_worker": j % w.workers, "position": p}
                    if rj is not None and rk is not None and rj.size == rk.size:
                        example["indices"] = [int(rk[p]), int(rj[p])]
                same |= eq
            repeated += int(same.sum())
    if not compared or repeated < MIN_ROWS or repeated < SHARE * compared:
        return None
    share = repeated / compared
    cause = "workers_generator" if w.generators else "workers_same"
    gens = ", ".join(w.generators) or "-"
    return finding(
        "workers_repeat", "workers", "warning", w.made,
        {"loader": f"'{w.name}'", "repeated": repeated, "n": compared, "share": f"{share:.0%}",
         "workers": w.workers, "batches": len(keys), "generators": gens},
        {"workers": w.workers, "batches_compared": len(keys), "samples_compared": compared,
         "repeated_samples": repeated, "repeated_share": round(share, 4), "example": example,
         "generators": w.generators, "loader": w.name},
        cause=cause)
