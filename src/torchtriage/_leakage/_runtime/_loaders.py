"""Which dataset rows each DataLoader batch holds, by index (issue 14): rows whose content
cannot be matched with the model's input.

Content fingerprints (`_fingerprint.py`) match a batch with a split's rows only when the batch
holds the rows as stored. A list of ``(label, token ids)`` samples packed by a ``collate_fn``
into EmbeddingBag ids + offsets, images transformed on load, tokenized texts: their batches
never equal the stored rows. The DataLoader knows the rows anyway: its sampler hands the
dataset indices of each batch to the fetcher. So `_next_index` is wrapped to note the indices of
each batch (a first-in first-out queue per iterator, because worker processes are handed
indices ahead of the batches they return, in order), and `__next__` to take the indices of the
batch it yields; Subsets are followed down to the dataset a split was drawn from (a `Base`).

Which forward a batch fed: a forward given one of the batch's tensors (the same storage: the
tensor, a view of it) is fed by it; otherwise a forward that comes first after the batch was
yielded, with an input whose first dimension is the batch size, when only one fresh batch is
that size (two loaders zipped and moved to the device are ambiguous: then nothing is marked by
index). A `ConcatDataset` is followed part by part: each part's index range maps to the base
its own Subsets lead to (a split's training part concatenated with extra data). Cost: nothing
until a split is seen; then per batch one small index tensor and a lookup, on the host (the
indices are the sampler's, already there); no device read.
"""

from __future__ import annotations

import collections
import dataclasses
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..._frames import user_files_on_stack
from ._adopt import adopt
from ._base import Base

if TYPE_CHECKING:
    from ._checker import LeakageWatch

MAX_TENSORS = 16  # batch tensors remembered per batch (to recognise the forward they feed)


@dataclasses.dataclass(eq=False)
class Batch:
    """One batch yielded by a DataLoader: where its rows sit in a split's base."""

    base: Base
    rows: torch.Tensor  # base indices (host int64)
    size: int
    storages: list[tuple[weakref.ref[torch.Tensor], int]]
    source: int  # the loader iterator's track (a newer batch of the same loader replaces it)
    fresh: bool = True  # no forward since it was yielded


@dataclasses.dataclass
class _Segment:
    """Dataset indices [lo, hi) of a loader's dataset that come from a split's base."""

    lo: int
    hi: int
    base: Base
    to_base: torch.Tensor | None  # index - lo -> base index (None: the identity)
    whole: bool = False  # the loader's whole dataset (no ConcatDataset around it)


@dataclasses.dataclass
class _Track:
    segments: list[_Segment]  # empty: no index of this dataset is in a split's base
    queue: collections.deque[Any] = dataclasses.field(default_factory=collections.deque)


class LoaderIndex:
    """The DataLoader wrappers and the batches they saw since the last forward."""

    def __init__(self, session: Any, watch: LeakageWatch) -> None:
        self.session = session
        self.watch = watch
        self.tracks: weakref.WeakKeyDictionary[Any, _Track] = weakref.WeakKeyDictionary()
        self.recent: list[Batch] = []
        self.fed = False  # a forward ran since the last batch was yielded
        self.files = user_files_on_stack(2)  # the user's code at the session's start (split lines)

    def install(self) -> None:
        from torch.utils.data import dataloader

        cls = dataloader._BaseDataLoaderIter
        originals = {name: vars(cls)[name] for name in ("_reset", "_next_index", "__next__")}
        index = self

        def _reset(it: Any, *args: Any, **kwargs: Any) -> Any:
            out = originals["_reset"](it, *args, **kwargs)
            index.tracks.pop(it, None)  # a new epoch: the sampler restarts
            return out

        def _next_index(it: Any) -> Any:
            out = originals["_next_index"](it)
            index.guarded(index.on_index, it, out)
            return out

        def __next__(it: Any) -> Any:
            data = originals["__next__"](it)
            index.guarded(index.on_batch, it, data)
            return data

        for name, fn in (("_reset", _reset), ("_next_index", _next_index), ("__next__", __next__)):
            fn.__wrapped__ = originals[name]  # type: ignore[attr-defined]
            fn.__name__ = name
            fn.__qualname__ = f"{cls.__name__}.{name}"
            self.session.patch(cls, name, fn)

    def guarded(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:  # our bug must never reach the user's code
            self.session.internal_error("leakage.loader", e)

    # ---------------------------------------------------------------- the loader's side
    def track(self, it: Any) -> _Track:
        found = self.tracks.get(it)
        if found is None:
            found = self.tracks[it] = self.resolve(it)
        return found

    def resolve(self, it: Any) -> _Track:
        """Where a loader's dataset indices sit in the bases splits were drawn from: Subsets are
        followed down to a base, a `ConcatDataset`'s parts each on their own index range."""
        if getattr(it, "_in_order", True) is False:
            return _Track([])
        found = self.segments(getattr(it, "_dataset", None), 0, 0)
        if len(found) == 1 and found[0].lo == 0 and not _is_concat(getattr(it, "_dataset", None)):
            found[0].whole = True
        return _Track(found)

    def segments(self, dataset: Any, lo: int, depth: int) -> list[_Segment]:
        from torch.utils.data import ConcatDataset, Subset

        if depth > 16:
            return []
        if isinstance(dataset, ConcatDataset):
            out: list[_Segment] = []
            start = 0
            for part, end in zip(dataset.datasets, dataset.cumulative_sizes):
                out += self.segments(part, lo + start, depth + 1)
                start = end
            return out
        if isinstance(dataset, Subset):  # a split made before the session: taken up now
            adopt(self.watch, dataset, self.files)
        if not self.watch.bases:
            return []
        to_base = None
        try:
            n = len(dataset)
        except TypeError:
            return []
        for _ in range(16):
            for b in self.watch.bases:
                if b.alive(dataset) and b.draws:
                    return [_Segment(lo, lo + n, b, to_base)]
            if not isinstance(dataset, Subset):
                break
            idx = torch.as_tensor(dataset.indices, dtype=torch.int64).reshape(-1)  # once per epoch
            to_base = idx if to_base is None else idx[to_base]
            dataset = dataset.dataset
        return []

    def on_index(self, it: Any, indices: Any) -> None:
        track = self.track(it)
        if track.segments:
            track.queue.append(indices)

    def on_batch(self, it: Any, data: Any) -> None:
        track = self.tracks.get(it)
        if track is None or not track.segments or not track.queue:
            return
        indices = track.queue.popleft()
        rows = _as_rows(indices)
        if rows is None:
            return
        if self.fed:
            self.recent, self.fed = [], False
        self.recent = [b for b in self.recent if b.source != id(track)]
        storages = _storages(data)
        for seg in track.segments:
            if seg.whole:
                local = rows  # (the common loader: one dataset, no range to cut)
            else:
                local = rows[(rows >= seg.lo) & (rows < seg.hi)] - seg.lo
                if not local.numel():
                    continue
            if seg.to_base is not None:
                local = seg.to_base[local]
            self.recent.append(Batch(seg.base, local, rows.numel(), storages, id(track)))

    # ---------------------------------------------------------------- the forward's side
    def feeding(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Batch]:
        """The batches that feed this forward (see the module docstring); each one's freshness ends."""
        self.fed = True
        if not self.recent:
            return []
        inputs = _tensors((args, kwargs))
        mine = {_storage(t) for t in inputs} - {0}
        found = [b for b in self.recent if any(ref() is not None and ptr in mine for ref, ptr in b.storages)]
        if not found:
            sizes = {int(t.shape[0]) for t in inputs if t.dim() >= 1}
            sized = [b for b in self.recent if b.fresh and b.size in sizes]
            found = sized if len({b.source for b in sized}) == 1 else []  # (one loader's batch: its parts)
        for b in self.recent:
            b.fresh = False
        return found


def _is_concat(dataset: Any) -> bool:
    from torch.utils.data import ConcatDataset

    return isinstance(dataset, ConcatDataset)


def _as_rows(indices: Any) -> torch.Tensor | None:
    """A sampler's batch as int64 positions on the host: ints, numpy integers, a list or an
    array of them; None for anything else (an iterable dataset's None, keys of a dict-like
    dataset: not positions)."""
    if isinstance(indices, torch.Tensor):
        if indices.is_floating_point() or indices.is_complex() or indices.device.type != "cpu":
            return None
        return indices.detach().to(torch.int64).reshape(-1)
    if isinstance(indices, (int, np.integer)) and not isinstance(indices, bool):
        return torch.tensor([int(indices)], dtype=torch.int64)
    if isinstance(indices, (list, tuple, np.ndarray)) and len(indices):
        arr = np.asarray(indices)
        if arr.dtype.kind in "iu" and arr.ndim == 1:
            return torch.from_numpy(arr.astype(np.int64, copy=False))
    return None


def _tensors(obj: Any, depth: int = 0) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if depth >= 3:
        return []
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        out: list[torch.Tensor] = []
        for v in obj[:MAX_TENSORS]:
            out += _tensors(v, depth + 1)
        return out[:MAX_TENSORS]
    return []


def _storage(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # a tensor subclass without storage
        return 0


def _storages(data: Any) -> list[tuple[weakref.ref[torch.Tensor], int]]:
    return [(weakref.ref(t), p) for t in _tensors(data) if (p := _storage(t))]
