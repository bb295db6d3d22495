"""Which dataset rows each DataLoader batch holds, by index (issue 14): rows whose content
cannot be matched with the model's input.

Content fingerprints (`_fingerprint.py`) match a batch with a split's rows only when the batch
holds the rows as stored. A list of ``(label, token ids)`` samples packed by a ``collate_fn``
into EmbeddingBag ids + offsets, images transformed on load, tokenized texts: their batches
never equal the stored rows. The DataLoader knows the rows anyway: its sampler hands the
dataset indices of each batch to the fetcher. The data ledger's stream of DataLoader events
(`_loaderstream.py`, the session's one follower of loaders: the sampler's indices of each
batch, in order also with worker processes) hands this index each batch with its indices;
Subsets are followed down to the dataset a split was drawn from (a `Base`).

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

import dataclasses
import weakref
from typing import TYPE_CHECKING, Any

import torch

from ..._frames import user_files_on_stack
from ..._loaderstream import as_rows, stream
from ..._loaderstream import tensors as _batch_tensors
from ._adopt import adopt
from ._base import Base

if TYPE_CHECKING:
    from ._checker import LeakageWatch


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
        stream(self.session).listen("leakage.loader", self)  # the data ledger's DataLoader events

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

    def on_begin(self, it: Any, loader: Any) -> None:
        self.tracks.pop(it, None)  # a new epoch: the sampler restarts

    def on_batch(self, it: Any, indices: Any, data: Any) -> None:
        track = self.track(it)
        if not track.segments:
            return
        arr = as_rows(indices)
        if arr is None:
            return
        rows = torch.from_numpy(arr)
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
        inputs = _batch_tensors((args, kwargs))
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


def _storage(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # a tensor subclass without storage
        return 0


def _storages(data: Any) -> list[tuple[weakref.ref[torch.Tensor], int]]:
    return [(weakref.ref(t), p) for t in _batch_tensors(data) if (p := _storage(t))]
