"""Held-out datasets that no DataLoader iterates (issue 25): their samples against the training
loader's.

A held-out dataset is often scored by hand (``metric(model, test_dataset.samples)``), so the
ledger never sees its samples go by. Where a DataLoader is made, the user's frame is read once
for `Dataset` objects whose variable names them held out as a word of their own
(`test_dataset`, `val_ds`; not `train_val_ds`) besides the loader's own, and their samples read
there (at most `MAX_SAMPLES`, evenly spaced, from the array of windows they hold in memory; never
through `__getitem__`, which may open files or draw random numbers), digested per slice. At the
end, those that no loader iterated are compared with the training loaders' samples as an
evaluation loader's would be: by overlapping windows (`_windows.py`: samples cut from one series
with a sliding window and split after a shuffle).
"""

from __future__ import annotations

import ast
import types
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._frames import UserFrame, released_locals, user_frame_of_line, user_stack_frame
from .._source import parsed
from ._epochs import Loader
from ._heldnames import SPLIT
from ._windows import slice_keys

if TYPE_CHECKING:
    from ._follow import Follower

MAX_SAMPLES = 512
MAX_DATASETS = 8
_HELD = SPLIT


class Unloaded:
    def __init__(self, follower: Follower) -> None:
        self.follower = follower
        self.held: list[tuple[int, Loader]] = []  # (the dataset's token, its samples as a loader's)
        self.frames: set[tuple[str, int]] = set()

    def on_made(self, loader: Any) -> None:
        """A DataLoader is made: the held-out datasets in the frame that makes it, read now (a
        script's `main()` has returned, and its datasets are gone, when the session ends)."""
        from torch.utils.data import Dataset

        f = user_stack_frame(1)
        if f is None or len(self.held) >= MAX_DATASETS:
            return
        key = (f.f_code.co_filename, f.f_lineno)
        if key in self.frames:
            return
        self.frames.add(key)
        own = getattr(loader, "dataset", None)
        known = {t for t, _ in self.held}
        for name, value in released_locals(f).items():
            if value is own or not isinstance(value, Dataset) or "train" in name.lower():
                continue
            if _HELD.search(name.lower()) is None:
                continue
            token = self.follower.token(value)
            if token in known:
                continue
            samples = _read(value)
            if samples is None:
                continue
            frame = _assigned(f, name)
            entry = Loader(name, frame, frame, 0, 0, "", False)
            with torch.no_grad():
                for axis, keys in slice_keys(samples).items():
                    entry.slices[axis] = [keys]
            entry.kept = int(samples.shape[0])
            self.held.append((token, entry))
            known.add(token)

    def candidates(self) -> list[Loader]:
        """The held-out datasets no loader iterated, as evaluation loaders."""
        iterated = {t for e in self.follower.loaders for t in e.chain}
        return [e for t, e in self.held if t not in iterated]


def _assigned(f: types.FrameType, name: str) -> UserFrame | None:
    """The last line of `f`'s function, up to now, that assigns `name`."""
    tree = parsed(f.f_code.co_filename)
    if tree is None:
        return None
    first, now = f.f_code.co_firstlineno, f.f_lineno
    best = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and first <= node.lineno <= now:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
                best = max(best, node.lineno)
    return user_frame_of_line(f.f_code.co_filename, best, f.f_code.co_name) if best else None


def _read(ds: Any) -> torch.Tensor | None:
    """Up to `MAX_SAMPLES` of the dataset's samples, when it holds them in memory as one float
    array of windows `(samples, A, B)` (an attribute, or a `TensorDataset`'s first tensor); None
    otherwise. The dataset's own `__getitem__` is never called (it may open files, draw random
    numbers or load images)."""
    try:
        n = len(ds)
    except TypeError:
        return None
    if n < 2:
        return None
    found = None
    try:
        fields = list(vars(ds).values())
    except TypeError:
        return None
    tensors = getattr(ds, "tensors", None)
    if isinstance(tensors, tuple) and tensors:
        fields.insert(0, tensors[0])
    for v in fields:
        if isinstance(v, (np.ndarray, torch.Tensor)) and v.ndim == 3 and v.shape[0] == n:
            kind = v.dtype.kind if isinstance(v, np.ndarray) else ("f" if v.is_floating_point() else "")
            if kind == "f":
                found = v
                break
    if found is None:
        return None
    picks = np.unique(np.linspace(0, n - 1, min(n, MAX_SAMPLES)).astype(np.int64))
    rows = found[picks] if isinstance(found, np.ndarray) else found.detach()[torch.from_numpy(picks)]
    rows = torch.from_numpy(np.ascontiguousarray(rows)) if isinstance(rows, np.ndarray) else rows
    return rows.float()
