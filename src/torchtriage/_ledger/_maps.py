"""A dataset's label encodings and its samples' labels, read from its attributes (`_encoding.py`).

An *encoding* is a map from names to indices that is a bijection onto 0..n-1: a dict of
strings to ints (`class_to_idx`, `label2id`, a vocabulary), its inverse (ints 0..n-1 to
strings: `idx_to_class`, `id2label`, a `names` dict), or a list of distinct strings held under a
name that says classes (`classes`, `class_names`; the index is the position). They are looked
for on the dataset and on the objects it holds, two levels deep (`base.class_to_idx`), and keyed
by their attribute path, so the same attribute is compared across splits.

*Labels*: one integer per sample, from a list of `(path, index)` pairs (`samples`, `imgs`: the
class name is the path component that is a class of the encoding, the parent folder first) or
from a sequence of ints (`targets`, `labels`). The dataset's own attributes come first: a
wrapper that remapped its `samples` wins over the `samples` of the object it wraps.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

DEPTH = 2  # attribute levels searched below the dataset
MOST_ATTRS = 64  # attributes looked at per object
MOST_CLASSES = 100_000
MOST_SAMPLES = 1 << 18  # per-sample labels kept per dataset (the first ones)
PER_SAMPLE = ("samples", "imgs", "targets", "labels", "y")


def encodings(dataset: Any) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    _walk(dataset, "", 0, out, set())
    return out


def _walk(obj: Any, prefix: str, depth: int, out: dict[str, dict[str, int]], visited: set[int]) -> None:
    if id(obj) in visited:
        return
    visited.add(id(obj))
    attrs = _attrs(obj)
    if attrs is None:
        return
    for name, value in list(attrs.items())[:MOST_ATTRS]:
        if not isinstance(name, str) or name.startswith("__"):
            continue
        path = f"{prefix}{name}"
        m = as_encoding(name, value)
        if m is not None:
            out[path + ("[list]" if isinstance(value, (list, tuple)) else "")] = m
        elif depth < DEPTH and _holder(value):
            _walk(value, path + ".", depth + 1, out, visited)


def _attrs(obj: Any) -> dict[str, Any] | None:
    try:
        d = vars(obj)
    except TypeError:
        return None
    return d if isinstance(d, dict) else None


def _holder(value: Any) -> bool:
    """An object of the user's whose attributes may hold an encoding (not a tensor, array,
    module, class or function: those hold none)."""
    import torch

    if isinstance(value, (type, torch.Tensor, np.ndarray, torch.nn.Module, str, bytes, int, float)):
        return False
    if callable(value) and not hasattr(value, "__getitem__"):
        return False
    mod = type(value).__module__ or ""
    return not mod.startswith(("builtins", "torch", "numpy", "pandas", "collections"))


def as_encoding(name: str, value: Any) -> dict[str, int] | None:
    if isinstance(value, dict):
        n = len(value)
        if not 2 <= n <= MOST_CLASSES:
            return None
        keys, vals = list(value), list(value.values())
        if all(isinstance(k, str) for k in keys) and all(_is_int(v) for v in vals):
            if sorted(int(v) for v in vals) == list(range(n)):
                return {k: int(v) for k, v in value.items()}
        elif all(_is_int(k) for k in keys) and all(isinstance(v, str) for v in vals):
            if sorted(int(k) for k in keys) == list(range(n)) and len(set(vals)) == n:
                return {v: int(k) for k, v in value.items()}
        return None
    if isinstance(value, (list, tuple)) and "class" in name.lower():
        if 2 <= len(value) <= MOST_CLASSES and all(isinstance(v, str) for v in value) \
                and len(set(value)) == len(value):
            return {v: i for i, v in enumerate(value)}
    return None


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclasses.dataclass(eq=False)
class Labels:
    """One label per sample (the first `MOST_SAMPLES`), and the class name from its path when
    the dataset lists `(path, index)` pairs."""

    values: np.ndarray
    names: list[str | None] | None  # per sample, from its path (None: the path named no class)
    source: str  # the attribute read, e.g. "samples (path, index)"

    @property
    def by_path(self) -> bool:
        return self.names is not None

    def name_of(self, i: int, own: dict[str, int]) -> str | None:
        if self.names is not None:
            return self.names[i]
        inverse = {v: k for k, v in own.items()}
        return inverse.get(int(self.values[i]))

    def _names(self, own: dict[str, int]) -> list[str | None]:
        if self.names is not None:
            return self.names
        inverse = {v: k for k, v in own.items()}
        return [inverse.get(int(v)) for v in self.values]

    def wrong(self, training: dict[str, int], own: dict[str, int]) -> np.ndarray:
        """Per sample: its label is the training encoding's index of another class."""
        names = self._names(own)
        return np.fromiter((nm is not None and nm in training and training[nm] != int(v)
                            for nm, v in zip(names, self.values)), dtype=bool, count=len(self.values))

    def agreement(self, own: dict[str, int]) -> float:
        """The share of the samples whose label is their class's index in `own` (named ones)."""
        names = self._names(own)
        known = [(nm, int(v)) for nm, v in zip(names, self.values) if nm is not None and nm in own]
        return sum(own[nm] == v for nm, v in known) / len(known) if known else 0.0


def labels(dataset: Any, n: int, maps: dict[str, dict[str, int]]) -> Labels | None:
    keys = {k for m in maps.values() for k in m}
    holders = [("", dataset)]
    for path in maps:
        obj, prefix = dataset, ""
        for part in path.split(".")[:-1]:
            obj = getattr(obj, part, None)
            prefix += part + "."
        if obj is not None and all(o is not obj for _, o in holders):
            holders.append((prefix, obj))
    for prefix, obj in holders:
        attrs = _attrs(obj) or {}
        for name in PER_SAMPLE:
            found = _per_sample(attrs.get(name), n, keys)
            if found is not None:
                values, names = found
                what = f"{prefix}{name}" + (" (path, index)" if names is not None else "")
                return Labels(values, names, what)
    return None


def _per_sample(value: Any, n: int, keys: set[str]) -> tuple[np.ndarray, list[str | None] | None] | None:
    if value is None or isinstance(value, (str, bytes, dict)):
        return None
    try:
        if len(value) != n or not n:
            return None
    except TypeError:
        return None
    head = value[: min(n, MOST_SAMPLES)] if isinstance(value, (list, tuple, np.ndarray)) else None
    if head is None:
        import torch

        if isinstance(value, torch.Tensor) and value.dim() == 1 and not value.is_floating_point():
            return value[:MOST_SAMPLES].cpu().numpy().astype(np.int64), None
        return None
    first = head[0]
    if isinstance(first, (tuple, list)) and len(first) >= 2 and isinstance(first[0], (str, os.PathLike)):
        if not all(isinstance(s, (tuple, list)) and len(s) >= 2 and _is_int(s[1]) for s in head):
            return None
        values = np.fromiter((int(s[1]) for s in head), dtype=np.int64, count=len(head))
        return values, [_class_of(os.fspath(s[0]), keys) for s in head]
    if isinstance(head, np.ndarray):
        return (head.astype(np.int64), None) if head.ndim == 1 and head.dtype.kind in "iu" else None
    if all(_is_int(v) for v in head):
        return np.fromiter((int(v) for v in head), dtype=np.int64, count=len(head)), None
    return None


def _class_of(path: str, keys: set[str]) -> str | None:
    parts = path.replace("\\", "/").split("/")[:-1]
    for part in reversed(parts):
        if part in keys:
            return part
    return None
