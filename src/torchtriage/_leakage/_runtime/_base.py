"""What a split is split from (`Base`), and one drawing of it (`Draw`), kept as device sketches.

A `Base` is the rows a split indexes (a TensorDataset's first tensor, the X given to
`train_test_split` or a KFold's `split`, the tensor indexed with a `randperm`). It keeps:

* ``uk``: the sorted distinct row digests (`_fingerprint.row_keys`), and ``first``: the base
  index of each digest's first row (an example index for reports). Above `SKETCH_ROWS` rows only
  the digests with ``key % rate == 0`` are kept (``rate`` a power of two): a consistent sample,
  the same rows on every side, so counts are estimates scaled by ``rate`` (bounded memory: about
  16 bytes per kept row, whatever the data size);
* per model, one byte per kept digest: trained on (a batch followed by an optimizer step),
  evaluated (a forward under no_grad / inference_mode / eval() without an update);
* the draws, each one byte per kept digest: 1 = on the training side, 2 = held out, 3 = both.

A dataset whose rows cannot be fingerprinted (a list of samples, files read on access) is a
`Base.indexed`: each row's "digest" is its index, and only DataLoader batches, whose indices the
sampler gives (`_loaders.py`), are matched with it (8 bytes per kept row, the same sampling
above `SKETCH_ROWS`: the kept indices are multiples of ``rate``).

Every array lives on the device of the batches compared with it; nothing here reads a value
back to the host (the checker reads its numbers with the session's per-step read, or once at
the end).
"""

from __future__ import annotations

import dataclasses
import itertools
import weakref
from typing import Any

import torch

from ..._frames import UserFrame
from ._fingerprint import row_keys

SKETCH_ROWS = 1 << 20
MAX_DRAWS = 64  # draws kept per base (KFold folds, redraws); the oldest go first
MAX_MODELS = 64  # models whose marks are kept per base (one per fold, a search); the oldest go first
TRAIN, HELD = 1, 2
_ids = itertools.count(1)


def _ref(obj: Any) -> Any:
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


@dataclasses.dataclass(eq=False)  # identity: draws are found in lists, and their parts are tensors
class Draw:
    """One drawing of a split: its parts (base indices, on the host) and their roles."""

    base: Base
    kind: str  # "random_split", "Subset", "train_test_split", "KFold", "randperm", ...
    frame: UserFrame | None
    family: int  # one CV splitter's .split() call: its folds are one family, not redraws
    steps: int  # optimizer steps seen when it was drawn
    parts: list[torch.Tensor] = dataclasses.field(default_factory=list)
    train: int = 0  # which part is the training side
    open: bool = False  # Subsets made one by one: a later disjoint Subset joins this draw
    taken_up: bool = False  # made before the session, taken up at its loader (`_adopt.py`)
    side: torch.Tensor | None = None
    order: int = dataclasses.field(default_factory=lambda: next(_ids))

    @property
    def where(self) -> str:
        return f"{self.frame.file}:{self.frame.line}" if self.frame else "?"

    def held(self) -> list[torch.Tensor]:
        return [p for i, p in enumerate(self.parts) if i != self.train]


class Base:
    """Rows that splits index, as a sketch of digests (see the module docstring)."""

    def __init__(self, obj: Any, rows: Any, n: int, keys: torch.Tensor | None, *, by_index: bool = False) -> None:
        self.by_index = by_index  # rows known by their index only (see `indexed`)
        self.ref = _ref(obj)
        if self.ref is None and by_index:  # a plain list of samples: held until the session ends
            self.ref = lambda: obj
        self.rows_ref = _ref(rows) if rows is not obj else self.ref
        self.n = n
        self.row_shape = tuple(rows.shape[1:]) if hasattr(rows, "shape") and not by_index else None
        self.rate = 1
        while n // self.rate > SKETCH_ROWS:
            self.rate *= 2
        # Digests of every row, kept for small bases (to place later draws without rehashing).
        self.keys: torch.Tensor | None = None
        if keys is None:  # by index: the kept rows' indices are the sorted digests and first rows
            self.device = torch.device("cpu")
            self.uk = self.first = torch.arange(0, n, self.rate, dtype=torch.int64)
        else:
            self.device = keys.device
            kept = torch.arange(n, device=keys.device)
            if self.rate > 1:
                keep = (keys & (self.rate - 1)) == 0
                kept = kept[keep]  # once per base, at split time (not in a step)
                keys = keys[keep]
            uk, inverse = torch.unique(keys, sorted=True, return_inverse=True)
            first = torch.full((uk.numel(),), n, dtype=torch.int64, device=keys.device)
            self.uk = uk
            self.first = first.scatter_reduce_(0, inverse, kept, reduce="amin")
            self.keys = keys if self.rate == 1 else None
        self.draws: list[Draw] = []
        # Marks by model token (not by the model: a model that dies before the session ends, e.g.
        # one built inside main(), still has its verdict; tokens are never reused, unlike ids).
        self.trained: dict[int, torch.Tensor] = {}
        self.evaluated: dict[int, torch.Tensor] = {}
        self.stats_done = False
        self._on: dict[torch.device, torch.Tensor] = {}
        self._pinned: torch.Tensor | None = None

    @property
    def m(self) -> int:
        return self.uk.numel()

    def alive(self, obj: Any) -> bool:
        return self.ref is not None and self.ref() is obj

    def rows(self) -> Any:
        return self.rows_ref() if self.rows_ref is not None else None

    def uk_on(self, device: torch.device) -> torch.Tensor:
        if device == self.device:
            return self.uk
        found = self._on.get(device)
        if found is None:  # once per base and device
            src = self.uk
            if device.type == "cuda" and src.device.type == "cpu":
                # Pinned memory, so the copy is queued on the stream instead of making the host
                # wait (a pageable copy would be a sync inside the first training step).
                src = self._pinned = src.pin_memory()
            found = self._on[device] = src.to(device, non_blocking=True)
        return found

    def positions(self, keys: torch.Tensor) -> torch.Tensor:
        """Sorted positions of `keys` in this base; `m` (a spare slot) where absent."""
        uk = self.uk_on(keys.device)
        pos = torch.searchsorted(uk, keys).clamp_(max=max(self.m - 1, 0))
        found = uk[pos] == keys if self.m else torch.zeros_like(keys, dtype=torch.bool)
        return torch.where(found, pos, torch.full_like(pos, self.m))

    @classmethod
    def indexed(cls, obj: Any, n: int) -> Base:
        """A dataset whose rows cannot be fingerprinted (a list of (label, tokens) samples, files
        read on access, pixels too many to hash): each row is its own index, so only DataLoader
        batches, whose indices are known (`_loaders.py`), are compared with its splits."""
        return cls(obj, obj, n, None, by_index=True)

    def index_positions(self, rows: torch.Tensor) -> torch.Tensor | None:
        """Sorted positions of the rows at these base indices (None: too many rows to keep
        every row's digest; content matching covers those)."""
        if self.by_index:
            return self.positions(rows)
        if self.keys is None:
            return None
        return self.positions(self.keys[rows if rows.device == self.keys.device else rows.to(self.keys.device)])

    def part_keys(self, idx: torch.Tensor) -> torch.Tensor | None:
        if self.by_index:
            return idx
        if self.keys is not None:
            return self.keys[idx.to(self.keys.device)]
        rows = self.rows()
        if rows is None:
            return None
        width = max(1, int(torch.tensor(rows.shape[1:]).prod().item()) if len(rows.shape) > 1 else 1)
        step = max(1, (1 << 22) // width)  # a chunk of rows at a time: never a copy of the split
        parts = []
        for i in range(0, idx.numel(), step):
            j = idx[i:i + step]
            keys = row_keys(rows[j.to(rows.device)] if isinstance(rows, torch.Tensor) else rows[j.numpy()])
            if keys is None:
                return None
            parts.append(keys)
        return torch.cat(parts) if parts else None

    def mark(self, table: dict[int, torch.Tensor], token: int, pos: torch.Tensor) -> None:
        arr = table.get(token)
        if arr is None:
            arr = torch.zeros(self.m + 1, dtype=torch.uint8, device=pos.device)
            table[token] = arr
            for old in list(table)[:-MAX_MODELS]:
                del table[old]
        if arr.device != pos.device:  # index marks (host) and content marks (the batch's device)
            if pos.device.type == "cpu":
                pos = pos.to(arr.device, non_blocking=True)
            else:
                arr = table[token] = arr.to(pos.device, non_blocking=True)
        arr.index_fill_(0, pos, 1)

    def add_draw(self, draw: Draw) -> None:
        side = torch.zeros(self.m + 1, dtype=torch.uint8, device=self.device)
        for i, idx in enumerate(draw.parts):
            keys = self.part_keys(idx)
            if keys is None:
                return
            pos = self.positions(keys.to(self.device))
            mask = torch.zeros_like(side).index_fill_(0, pos, TRAIN if i == draw.train else HELD)
            side |= mask
        side[self.m] = 0
        draw.side = side
        self.draws.append(draw)
        del self.draws[:-MAX_DRAWS]
