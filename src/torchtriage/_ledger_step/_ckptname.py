"""A checkpoint file name whose labels and values are swapped (session 16).

Checkpoint names carry the metrics they were saved at (`val_acc_0.75_train_acc_0.98_epoch_7.pth`),
and the file picked later is chosen by reading them back. A format string whose placeholders are
filled in another order than its labels (`'val_acc_{}_train_acc_{}'.format(train_acc, val_acc)`)
writes the training accuracy where the name says validation accuracy: the checkpoint chosen by its
name is the most overfit one.

Measured at each `torch.save` to a path: the file name's `label<sep>number` pairs are compared
with the numbers in sight under those labels' names (the locals of the saving function and its
caller). A pair is swapped when the number written after label A is the value of the variable
named B, and the number written after label B is the value of A, the two values differ. A
finding when it holds at `MIN_SAVES` writes or more: every file's name reports the wrong value.
Cost: a regular expression on the path and a look at two frames' locals per save.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from .._frames import UserFrame, find_frame, in_user_file, user_frame_of

MIN_SAVES = 2
_PAIR = re.compile(r"([A-Za-z][A-Za-z_]*?)[_=\-:]?(-?\d+(?:\.\d+)?(?:[eE]-?\d+)?)(?=$|[_\-.](?!\d))")


def pairs(name: str) -> list[tuple[str, str]]:
    """(label, number text) pairs of a name: 'val_acc_0.75_epoch_7.pth' -> [('val_acc', '0.75'), ('epoch', '7')]."""
    out = []
    for m in _PAIR.finditer(name):
        label = m.group(1).strip("_-")
        if label:
            out.append((label, m.group(2)))
    return out


def _agrees(text: str, v: float) -> bool:
    try:
        x = float(text)
    except ValueError:
        return False
    decimals = len(text.split(".")[1]) if "." in text and "e" not in text.lower() else 0
    tol = max(0.5 * 10 ** -decimals if "." in text else 0.5, 1e-9 * abs(v))
    return abs(x - v) <= tol


def _numbers(skip: int) -> tuple[dict[str, float], UserFrame | None]:
    out: dict[str, float] = {}
    frame = find_frame(in_user_file, sys._getframe(skip), depth=64)
    where = user_frame_of(frame) if frame is not None else None
    seen = 0
    while frame is not None and seen < 2:
        seen += 1
        for k, v in list(frame.f_locals.items()):
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in out:
                out[k] = float(v)
            else:
                try:
                    import numpy as np
                    if isinstance(v, np.floating) and k not in out:
                        out[k] = float(v)
                except ImportError:  # pragma: no cover
                    pass
        frame = find_frame(in_user_file, frame.f_back, depth=64)
    return out, where


def swapped(basename: str, skip: int) -> tuple[tuple[str, str, str, str], UserFrame | None] | None:
    """(label a, label b, text after a, text after b) of a swapped pair in the name, and the saving line."""
    found = pairs(basename)
    if len(found) < 2:
        return None
    numbers, where = _numbers(skip)
    for i, (a, ta) in enumerate(found):
        va = numbers.get(a)
        if va is None:
            continue
        for b, tb in found[i + 1:]:
            vb = numbers.get(b)
            if vb is None or va == vb or b == a:
                continue
            if _agrees(ta, vb) and _agrees(tb, va) and not _agrees(ta, va):
                return (a, b, ta, tb), where
    return None


class NameWatch:
    """Swapped label/value pairs in the names of the files `torch.save` writes, per saving line."""

    def __init__(self) -> None:
        self.sites: dict[tuple[str, int], list[Any]] = {}  # (file, line) -> [count, first evidence, frame]

    def saved(self, path: str, skip: int) -> None:
        import os
        hit = swapped(os.path.basename(path), skip + 1)
        if hit is None:
            return
        (a, b, ta, tb), where = hit
        if where is None:
            return
        key = (where.file, where.line)
        entry = self.sites.setdefault(key, [0, (a, b, ta, tb, os.path.basename(path)), where])
        entry[0] += 1
