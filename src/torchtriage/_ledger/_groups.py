"""Groups: a key that several samples share (a patient, a speaker, a document), and the splits
it spans (issue 25).

Where a key comes from:

* a field of the batches a loader yields (a dict batch, or a list of strings beside the
  tensors is not enough: the field must be named), holding one value per sample: a list of
  strings or integers, or a 1-d integer tensor on the host;
* a column of a pandas DataFrame (or a field of a numpy structured array) that the root dataset
  holds as an attribute, one row per sample: read at the indices the sampler gave.

A key is taken for a group when its name says so (a word of `WORDS`, e.g. ``patient_id``,
``speaker``, ``doc_id``) and its values repeat: at least `REPEAT` samples per value on average
in the loaders that carry it (a key unique per sample is a row id, not a group). A group found
in a training loader and in an evaluation loader spans two splits: the evaluation measures
memory of the group, not the task (a warning).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import torch

from ._epochs import Loader

WORDS = frozenset({"group", "patient", "subject", "speaker", "user", "doc", "document", "session", "site",
                   "video", "author", "writer", "customer", "participant", "family", "study", "case", "clip",
                   "recording", "person", "individual", "animal", "plant", "slide", "scan", "source"})
REPEAT = 2.0
MAX_VALUES = 1 << 17  # distinct values kept per loader and key


def group_like(name: Any) -> bool:
    if not isinstance(name, str):
        return False
    words = {w for w in re.split(r"[^a-z0-9]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()) if w}
    return bool(words & WORDS)


def from_batch(entry: Loader, data: Any, size: int) -> None:
    """Group values of a dict batch's group-like fields (one value per sample)."""
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        if not group_like(key):
            continue
        values = _values(value, size)
        if values is not None:
            _add(entry, str(key), values)


def _values(value: Any, size: int) -> list[Any] | None:
    if isinstance(value, torch.Tensor):
        if value.dim() != 1 or int(value.shape[0]) != size or value.is_floating_point() or value.device.type != "cpu":
            return None
        return value.tolist()
    if isinstance(value, (list, tuple)) and len(value) == size and value and isinstance(value[0], (str, int)):
        return list(value)
    return None


def _add(entry: Loader, key: str, values: list[Any]) -> None:
    seen = entry.groups.setdefault(key, {})
    if len(seen) >= MAX_VALUES:
        return
    for v in values:
        seen[v] = seen.get(v, 0) + 1


def columns(root: Any, n: int) -> dict[str, np.ndarray]:
    """Group-like columns of a DataFrame or structured array the dataset holds, one row per sample."""
    out: dict[str, np.ndarray] = {}
    try:
        attrs = list(vars(root).values())
    except TypeError:
        return out
    for obj in attrs[:32]:
        names: list[Any] = []
        if type(obj).__name__ == "DataFrame" and hasattr(obj, "columns"):
            names = list(obj.columns)
        elif isinstance(obj, np.ndarray) and obj.dtype.names:
            names = list(obj.dtype.names)
        else:
            continue
        if len(obj) != n:
            continue
        for c in names:
            if group_like(c) and str(c) not in out:
                col = np.asarray(obj[c])
                if col.ndim == 1 and col.dtype.kind in "iuUSO":
                    out[str(c)] = col
    return out


def from_indices(entry: Loader, roots: np.ndarray) -> None:
    for key, col in entry.columns.items():
        _add(entry, key, col[roots].tolist())


def verdicts(loaders: list[Loader]) -> list[Any]:
    from ._make import finding
    from ._make import label as _label

    train = [e for e in loaders if e.trains and e.groups]
    held = [e for e in loaders if not e.trains and e.groups and "train" not in e.name.lower()]
    out = []
    for e in held:
        for t in train:
            for key in sorted(set(e.groups) & set(t.groups)):
                eg, tg = e.groups[key], t.groups[key]
                rows = sum(eg.values()) + sum(tg.values())
                per = rows / max(len(set(eg) | set(tg)), 1)
                if per < REPEAT:
                    continue  # unique per sample: a row id
                shared = [g for g in eg if g in tg]
                if not shared:
                    continue
                fields = {"eval": _label(e), "train": _label(t), "key": key, "count": len(shared), "n": len(eg),
                          "per": f"{per:.1f}", "examples": ", ".join(map(str, shared[:3]))}
                evidence = {"key": key, "evaluation_loader": e.name, "training_loader": t.name,
                            "shared_groups": len(shared), "evaluation_groups": len(eg),
                            "samples_per_group": round(per, 2), "examples": [str(g) for g in shared[:5]],
                            "why_a_group": f"the name '{key}' names a group and each value is shared by "
                                           f"{per:.1f} samples on average"}
                out.append(finding("group_overlap", "group", "warning", e.made or e.frame, fields, evidence))
                break
    return out
