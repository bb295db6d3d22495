"""Following every DataLoader pass: which samples each batch holds, and what the loop did with
the batch before it asked for the next one.

The session's DataLoader events (`.._loaderstream`: a loader made, a pass begun, a batch with the
sampler's indices, the sampler exhausted) fill the ledger (`_epochs.py`). Indices are followed
down a `Subset` chain to the root dataset, so two loaders over parts of one dataset speak of the same samples. With
`in_order=False` the batches come back out of order: only their sizes are counted. An
`IterableDataset` has no indices: its samples are known by content only.

Cost per batch: a few Python calls, one index lookup on the host (the sampler's indices are
there already), and in a loader's first pass the content digests of the batch's per-sample
tensor (`dense_keys`: about 20 elementwise integer kernels on at most 513 values per row, on the
batch's device, no host read).
"""

from __future__ import annotations

import dataclasses
import itertools
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._frames import UserFrame, user_frame_from_stack, user_stack_frame
from .._leakage._runtime._fingerprint import dense_keys
from .._loaderstream import as_rows, stream
from .._loaderstream import tensors as batch_tensors
from ._epochs import MAX_KEYS, Epoch, Loader
from ._epochwrap import inner_epochs, outer_epoch
from ._evalnames import EvalNames
from ._groups import columns, from_batch, from_indices
from ._lines import assigned_name, loop_name
from ._passes import dataset_size, promised
from ._roles import Samplers
from ._scaling import stored, summarize
from ._unloaded import Unloaded
from ._windows import slice_keys

if TYPE_CHECKING:
    from ._checker import DataLedger


_tokens = itertools.count(1)


@dataclasses.dataclass(eq=False)
class _Pass:
    loader: Loader
    epoch: Epoch
    to_root: np.ndarray | None
    in_order: bool


class Follower:
    def __init__(self, session: Any, ledger: DataLedger) -> None:
        self.session = session
        self.ledger = ledger
        self.passes: weakref.WeakKeyDictionary[Any, _Pass] = weakref.WeakKeyDictionary()
        self.made: weakref.WeakKeyDictionary[Any, UserFrame] = weakref.WeakKeyDictionary()
        # Root datasets by token: the loaders over one dataset are compared by index even after
        # the dataset is gone (a script's main() returned before the session ends).
        self.tokens: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.loaders: list[Loader] = []
        # Exhausted passes whose last batch's window is still open: a prefetching loop trains on
        # its last batch after the sampler ran out; the window ends at another loader's batch.
        self.tails: list[tuple[Loader, Epoch]] = []
        self.last: Loader | None = None  # the loader that yielded the latest batch (the next forward's)
        self.unloaded = Unloaded(self)
        self.samplers = Samplers()
        self.names = EvalNames()  # what the user calls each pass's result (`_evalnames.py`)

    def install(self) -> None:
        stream(self.session).listen("ledger.loader", self)

    # ------------------------------------------------------------------ the stream's events
    def on_stop(self, it: Any) -> None:
        p = self.passes.get(it)
        if p is not None and p.epoch.stop is None:
            p.epoch.stop = self.ledger.counters()
            if not p.epoch.complete:
                p.epoch.complete = True
                self.tails.append((p.loader, p.epoch))

    def on_begin(self, it: Any, loader: Any) -> None:
        self.on_reset(it, loader)

    def on_made(self, loader: Any) -> None:
        frame = user_frame_from_stack(2)
        if frame is not None:
            self.made[loader] = frame
            self.unloaded.on_made(loader)  # held-out datasets beside it, which no loader may iterate
            self.samplers.on_made(loader)  # index samplers beside it, which no loader may be given
            root = root_of(getattr(loader, "dataset", None))[0]
            self.names.on_made(assigned_name(frame.source), frame, self.token(root))

    def on_reset(self, it: Any, loader: Any) -> None:
        old = self.passes.pop(it, None)
        if old is not None:
            self.ledger.close(old.loader, old.epoch)
        frame = user_frame_from_stack(2)
        root, n, to_root = root_of(getattr(loader, "dataset", None))
        entry = self.find(loader, frame, root, n)
        self.names.on_pass(entry, user_stack_frame(1))
        if not entry.epochs:  # its first pass: the samples it holds in memory, summarized (`_scaling.py`)
            entry.moments = summarize(root, n, to_root)
            entry.stored = stored(root, n, to_root)
            entry.first["members"] = to_root  # its rows in the root (None: all of them)
        if entry.epochs and not entry.epochs[-1].closed:
            self.ledger.close(entry, entry.epochs[-1])  # the loader's next pass: the last one ended
        sampler = _sampler(loader)
        shuffled = _shuffles(sampler)
        epoch = Epoch(len(entry.epochs), shuffled, getattr(sampler, "epoch", None) if entry.distributed else None)
        epoch.outer_epoch = outer_epoch(sampler)
        if epoch.outer_epoch is not None:
            epoch.inner_epochs = inner_epochs(sampler)
            if epoch.inner_epochs:
                epoch.sampler_cls = type(sampler)
        epoch.mark = self.ledger.counters()
        epoch.calls = self.ledger.calls
        epoch.promised = promised(loader, sampler)
        try:
            epoch.expected = len(it)  # (a loop that counts its batches never exhausts the sampler: Lightning)
        except TypeError:
            epoch.expected = None
        entry.epochs.append(epoch)
        self.passes[it] = _Pass(entry, epoch, to_root, getattr(loader, "in_order", True) is not False)

    def find(self, loader: Any, frame: UserFrame | None, root: Any, n: int) -> Loader:
        made = self.made.get(loader)
        token = self.token(root)
        chain = self.chain(getattr(loader, "dataset", None))
        for entry in self.loaders:
            if entry.root_token == token and entry.chain == chain and entry.n == n and entry.frame == frame \
                    and entry.made == made:
                return entry
        name = (assigned_name(made.source) if made else None) or (loop_name(frame.source) if frame else None)
        sampler = _sampler(loader)
        from torch.utils.data.distributed import DistributedSampler

        entry = Loader(name or type(loader).__name__, frame, made, token,
                       n, type(sampler).__name__, isinstance(sampler, DistributedSampler))
        if root is not None and n:
            entry.columns = columns(root, n)
        entry.whole = getattr(loader, "dataset", None) is root
        entry.chain = chain
        entry.size = dataset_size(loader)
        if self.ledger.samplers is not None:
            self.ledger.samplers.note(entry, sampler)
        self.loaders.append(entry)
        return entry

    def chain(self, dataset: Any) -> tuple[int, ...]:
        from torch.utils.data import Subset

        out = []
        for _ in range(16):
            out.append(self.token(dataset))
            if not isinstance(dataset, Subset):
                break
            dataset = dataset.dataset
        return tuple(out)

    def token(self, root: Any) -> int:
        if root is None:
            return 0
        if isinstance(root, (torch.Tensor, np.ndarray)):
            return -id(root)  # (a weak-keyed lookup compares keys with ==: elementwise for arrays)
        try:
            found = self.tokens.get(root)
            if found is None:
                found = self.tokens[root] = next(_tokens)
            return found
        except TypeError:  # not weakly referenceable: by id (alive while its loader iterates)
            return -id(root)

    def on_batch(self, it: Any, indices: Any, data: Any) -> None:
        p = self.passes.get(it)
        if p is None:
            return
        ep = p.epoch
        if self.tails:
            tails, self.tails = self.tails, []
            for entry, other in tails:
                if (other.calls == self.ledger.calls and other.mark == self.ledger.counters() and other is not ep
                        and other.grad == torch.is_grad_enabled()):
                    # Nothing used its last batch yet: fetched together with this one for one step
                    # (an episode's support and query sets, one batch of each of two loaders). A batch
                    # fetched under another grad mode (an evaluation pass's last) is no partner.
                    self.tails.append((entry, other))
                else:
                    self.ledger.end_window(other)
        bw, fw = self.ledger.counters()
        if ep.sizes:  # the previous batch's window ends here
            ep.backwards.append(bw - ep.mark[0])
            ep.forwards.append(fw - ep.mark[1])
        ep.mark = (bw, fw)
        ep.calls = self.ledger.calls
        ep.grad = torch.is_grad_enabled()
        rows = as_rows(indices) if p.in_order else None
        tensors = batch_tensors(data)
        size = len(rows) if rows is not None else next((int(t.shape[0]) for t in tensors if t.dim() >= 1), 1)
        roots = None
        if rows is not None and p.loader.n:
            if p.to_root is not None:
                rows = p.to_root[rows] if rows.size and rows.max() < p.to_root.size else None
            roots = rows if rows is not None and (not rows.size or rows.max() < p.loader.n) else None
        ep.sizes.append(size)
        ep.roots.append(roots)
        self.last = p.loader
        if ep.expected is not None and ep.batches == ep.expected and not ep.complete:
            # the sampler's last batch (a loop that counts its batches never asks for more)
            ep.complete = True
            self.tails.append((p.loader, ep))
        if roots is not None:
            ep.order.update(roots.tobytes())
        else:
            ep.order.update(size.to_bytes(4, "little"))
        entry = p.loader
        if ep.number == 0 and entry.kept < MAX_KEYS:
            self.fingerprint(entry, tensors, size)
        if ep.number == 0:  # (the groups of one pass: repeated passes would inflate the counts)
            if entry.columns and roots is not None:
                from_indices(entry, roots)
            from_batch(entry, data, size)

    def fingerprint(self, entry: Loader, tensors: list[torch.Tensor], size: int) -> None:
        t = next((t for t in tensors if t.dim() >= 2 and int(t.shape[0]) == size and not t.is_complex()), None)
        if t is None or not size:
            return
        shape = tuple(t.shape[1:])
        if entry.row_shape is None:
            entry.row_shape = shape
        elif entry.row_shape != shape:
            entry.ragged = True  # variable-length rows (padded per batch): not comparable by content
            return
        entry.keys.append(dense_keys(t))
        if t.dim() in (3, 4) and t.is_floating_point():  # windows of a series (`_windows.py`)
            for axis, keys in slice_keys(t).items():
                entry.slices.setdefault(axis, []).append(keys)
        entry.kept += size


def root_of(dataset: Any) -> tuple[Any, int, np.ndarray | None]:
    """The dataset at the end of a `Subset` chain, its length, and the map from the loader's
    indices to its indices (None: the identity)."""
    from torch.utils.data import IterableDataset, Subset

    to_root: np.ndarray | None = None
    for _ in range(16):
        if not isinstance(dataset, Subset):
            break
        idx = np.asarray(dataset.indices, dtype=np.int64).reshape(-1)
        to_root = idx if to_root is None else idx[to_root]
        dataset = dataset.dataset
    if dataset is None or isinstance(dataset, IterableDataset):
        return None, 0, None
    try:
        n = len(dataset)
    except TypeError:
        return None, 0, None
    return dataset, n, to_root


def _sampler(loader: Any) -> Any:
    bs = getattr(loader, "batch_sampler", None)
    inner = getattr(bs, "sampler", None)
    return inner if inner is not None else getattr(loader, "sampler", None)


def _shuffles(sampler: Any) -> bool:
    from torch.utils.data import RandomSampler, SubsetRandomSampler
    from torch.utils.data.distributed import DistributedSampler

    if isinstance(sampler, DistributedSampler):
        return bool(getattr(sampler, "shuffle", False))
    return isinstance(sampler, (RandomSampler, SubsetRandomSampler))
