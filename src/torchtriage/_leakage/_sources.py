"""What a split can be, and how it is read: one `Source` per split, read in chunks.

Three kinds, and the splits of one check must share a kind (digests of different kinds are
not comparable, see `_hashing`):

* ``table``: a pandas DataFrame, or a CSV / JSONL / Parquet file path (columns by name);
* ``array``: a numpy array or a torch tensor (rows along dim 0);
* ``samples``: a torch Dataset, Subset (also from ``random_split``), DataLoader (its dataset,
  restricted to its sampler's indices when it has them), or a Python list/tuple of samples.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .._catalogue import msg
from ._hashing import to_numpy
from ._tables import file_columns, file_format, is_shards, iter_file, iter_files, iter_frame, shard_columns, shard_paths

ACCEPTED = ("torch Dataset / Subset / DataLoader, numpy array, torch tensor, pandas DataFrame, "
            "list or tuple of samples, or a path to a .csv / .jsonl / .parquet file")
LABEL_KEYS = ("label", "labels", "y", "target", "targets")
BLOCK_BYTES = 64 << 20
INPUT_KEYS = ("input_ids", "pixel_values", "image", "img", "text", "input", "inputs", "x", "features")


@dataclasses.dataclass
class Block:
    """One chunk of one split: rows ``start .. start + n``."""

    start: int
    n: int
    cols: dict[str, Any] | None = None        # table
    values: np.ndarray | None = None          # array
    samples: list[Any] | None = None          # samples (raw items)
    inputs: np.ndarray | None = None          # samples from a TensorDataset: the inputs, stacked
    auto_labels: Any = None                   # labels the samples carry themselves


@dataclasses.dataclass
class Source:
    name: str
    kind: str
    what: str
    n: int | None
    obj: Any = None
    path: str | None = None
    columns: list[str] = dataclasses.field(default_factory=list)
    root: Any = None                           # the dataset indices refer to (Subset, loader)
    indices: np.ndarray | None = None
    paths: list[str] | None = None             # shards of one split, read in this order

    def blocks(self, size: int) -> Iterator[Block]:
        size = self._budget(size)
        if self.kind == "table":
            if self.paths:
                it = iter_files(self.paths, size)
            else:
                it = iter_file(self.path, size) if self.path else iter_frame(self.obj, size)
            start = 0
            for cols in it:
                n = len(next(iter(cols.values()))) if cols else 0
                yield Block(start, n, cols=cols)
                start += n
        elif self.kind == "array":
            arr = self.obj
            for start in range(0, arr.shape[0], size):
                part = arr[start:start + size]
                yield Block(start, part.shape[0], values=np.asarray(to_numpy(part)))
        else:
            yield from self._sample_blocks(size)

    def _budget(self, size: int) -> int:
        """Rows per chunk so that a float64 copy of a chunk stays near BLOCK_BYTES (images!)."""
        per_row = 0
        if self.kind == "array":
            per_row = int(np.prod(self.obj.shape[1:])) if self.obj.ndim > 1 else 1
        elif self.kind == "samples" and self.indices is not None and len(self.indices):
            try:
                first = sample_input(self.root[int(self.indices[0])], type(self.root).__name__ == "_ListDataset")
            except Exception:  # the scan itself will report a broken dataset
                return size
            arr = to_numpy(first)
            per_row = int(arr.size) if arr is not None else 0
        return max(1, min(size, BLOCK_BYTES // max(8 * per_row, 1)))

    def _sample_blocks(self, size: int) -> Iterator[Block]:
        ds, idx = self.root, self.indices
        assert idx is not None  # a samples source always has its indices
        tensors = getattr(ds, "tensors", None)
        if tensors is not None and type(ds).__name__ == "TensorDataset":
            # Gather rows in bulk: same digests as item by item, without a Python call per row.
            for start in range(0, len(idx), size):
                sel = idx[start:start + size]
                inputs = to_numpy(tensors[0][sel])
                labels = to_numpy(tensors[1][sel]) if len(tensors) >= 2 else None
                yield Block(start, len(sel), samples=None, inputs=inputs, auto_labels=labels)
            return
        for start in range(0, len(idx), size):
            items = [ds[int(i)] for i in idx[start:start + size]]
            yield Block(start, len(items), samples=items)

    def fetch(self, i: int) -> Any:
        """Row `i` for a preview (in-memory splits only; None for files)."""
        if self.kind == "array":
            return self.obj[i]
        if self.kind == "table":
            return None if self.path else self.obj.iloc[i].to_dict()
        assert self.indices is not None  # a samples source always has its indices
        return self.root[int(self.indices[i])]


def _describe(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def make_source(obj: Any, name: str) -> Source:
    """Wrap one split; a TypeError names what was given and what is accepted."""
    if isinstance(obj, (str, os.PathLike)) and is_shards(os.fspath(obj)):
        paths = shard_paths(os.fspath(obj))
        cols = shard_columns(paths)
        return Source(name, "table", f"{len(paths)} files {os.fspath(obj)}", None, path=None, columns=cols, paths=paths)
    if isinstance(obj, (str, os.PathLike)):
        path = os.fspath(obj)
        file_format(path)
        if not os.path.isfile(path):
            raise ValueError(msg("leakage.unreadable", path=path, error="no such file"))
        cols = file_columns(path)
        return Source(name, "table", f"file {path}", None, path=path, columns=cols)
    mod = type(obj).__module__
    if mod.startswith("pandas") and hasattr(obj, "iloc") and hasattr(obj, "columns"):
        return Source(name, "table", f"DataFrame {obj.shape[0]}×{obj.shape[1]}", len(obj), obj=obj,
                      columns=[str(c) for c in obj.columns])
    if isinstance(obj, np.ndarray) or (mod.startswith("torch") and type(obj).__name__ in ("Tensor", "Parameter")):
        arr = obj if isinstance(obj, np.ndarray) else obj.detach()
        if arr.ndim == 0:
            raise TypeError(msg("leakage.bad_split", name=name, given="a 0-d array", accepted=ACCEPTED))
        if isinstance(obj, np.ndarray) and obj.dtype.kind not in "biuf":
            return _list_source(list(obj), name, f"numpy array of {obj.dtype}")
        return Source(name, "array", f"{'numpy array' if isinstance(obj, np.ndarray) else 'tensor'} "
                      f"{tuple(arr.shape)}", int(arr.shape[0]), obj=arr)
    try:
        from torch.utils.data import DataLoader, Dataset, Subset
    except ImportError:  # pragma: no cover - torch is a dependency
        DataLoader = Dataset = Subset = ()  # type: ignore[assignment,misc]
    if isinstance(obj, DataLoader):
        ds = obj.dataset
        sampler_idx = getattr(obj.sampler, "indices", None)
        root, idx = _unwrap(ds)
        if sampler_idx is not None:
            idx = idx[np.asarray(list(sampler_idx), dtype=np.int64)]
        return Source(name, "samples", f"DataLoader over {_describe(root)} ({len(idx)} items)", len(idx),
                      obj=obj, root=root, indices=idx)
    if isinstance(obj, Dataset):
        if not hasattr(obj, "__len__") or not hasattr(obj, "__getitem__"):
            raise TypeError(msg("leakage.bad_split", name=name, given=f"{_describe(obj)} (an iterable "
                                "dataset without len/indexing)", accepted=ACCEPTED))
        root, idx = _unwrap(obj)
        kind = "Subset" if isinstance(obj, Subset) else "Dataset"
        return Source(name, "samples", f"{kind} of {_describe(root)} ({len(idx)} items)", len(idx),
                      obj=obj, root=root, indices=idx)
    if isinstance(obj, (list, tuple)):
        return _list_source(list(obj), name, f"{type(obj).__name__} of {len(obj)} items")
    raise TypeError(msg("leakage.bad_split", name=name, given=_describe(obj), accepted=ACCEPTED))


class _ListDataset:
    """A Python list seen as a dataset; its tuples are (input, label, ...) samples."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        return self.items[i]


def _list_source(items: list[Any], name: str, what: str) -> Source:
    return Source(name, "samples", what, len(items), obj=items, root=_ListDataset(items),
                  indices=np.arange(len(items), dtype=np.int64))


def _unwrap(ds: Any) -> tuple[Any, np.ndarray]:
    """(root dataset, indices into it) through nested Subsets."""
    from torch.utils.data import Subset

    idx = np.arange(len(ds), dtype=np.int64)
    while isinstance(ds, Subset):
        idx = np.asarray(list(ds.indices), dtype=np.int64)[idx]
        ds = ds.dataset
    return ds, idx


# --- what a sample's input, label and keys are -------------------------------------------

def sample_input(sample: Any, from_list: bool, drop: frozenset[str] = frozenset()) -> Any:
    """The part of a sample that is the model's input (`drop`: group/time/label keys of dicts)."""
    if isinstance(sample, tuple) or (isinstance(sample, list) and not from_list):
        return sample[0] if len(sample) else sample
    if isinstance(sample, Mapping):
        for k in INPUT_KEYS:
            if k in sample:
                return sample[k]
        return {k: v for k, v in sample.items() if k not in LABEL_KEYS and k not in drop}
    return sample


def sample_label(sample: Any, from_list: bool) -> Any:
    """The label a sample carries itself, or a marker that it carries none."""
    if (isinstance(sample, tuple) or (isinstance(sample, list) and not from_list)) and len(sample) >= 2:
        return sample[1]
    if isinstance(sample, Mapping):
        for k in LABEL_KEYS:
            if k in sample:
                return sample[k]
    return _NONE


_NONE = object()


@dataclasses.dataclass
class Spec:
    """How to get a per-row key (group, time or label) for every split."""

    role: str                      # "group" | "time" | "label"
    column: str | None = None
    call: Callable[[Any], Any] | None = None
    seqs: dict[str, Sequence[Any]] | None = None

    def values(self, src: Source, block: Block) -> list[Any] | np.ndarray:
        if self.seqs is not None:
            seq = self.seqs[src.name]
            return list(seq[block.start:block.start + block.n])
        if self.column is not None:
            if src.kind == "table":
                return block.cols[self.column]  # type: ignore[index]
            items = _rows(src, block)
            try:
                return [it[self.column] for it in items]
            except (KeyError, TypeError, IndexError):
                raise ValueError(msg("leakage.key_not_in_sample", role=self.role, column=self.column,
                                     name=src.name, given=type(items[0]).__name__ if items else "?")) from None
        assert self.call is not None
        return [self.call(r) for r in _rows(src, block)]


def _rows(src: Source, block: Block) -> list[Any]:
    if src.kind == "table":
        cols = block.cols or {}
        names = list(cols)
        return [dict(zip(names, vals)) for vals in zip(*(cols[c] for c in names))]
    if src.kind == "array":
        return list(block.values)  # type: ignore[arg-type]
    if block.samples is None:  # TensorDataset fast path: rebuild the (x, y) items on demand
        ds, idx = src.root, src.indices
        return [ds[int(i)] for i in idx[block.start:block.start + block.n]]  # type: ignore[index]
    return block.samples


def make_spec(role: str, value: Any, sources: list[Source]) -> Spec | None:
    """Normalize a groups/time/labels argument; errors say what is accepted."""
    if value is None:
        return None
    names = [s.name for s in sources]
    accepted = msg("leakage.spec_accepted", names=", ".join(names))
    if isinstance(value, str):
        for s in sources:
            if s.kind == "array":
                raise TypeError(msg("leakage.bad_spec", role=role, given=f"column name {value!r} for an array "
                                    "split", accepted=accepted))
            if s.kind == "table" and value not in s.columns:
                raise ValueError(msg("leakage.missing_column", role=role, column=value, name=s.name,
                                     columns=", ".join(s.columns[:20]) or "(none)"))
        return Spec(role, column=value)
    if callable(value):
        return Spec(role, call=value)
    if isinstance(value, Mapping):
        missing = [n for n in names if n not in value]
        if missing:
            raise ValueError(msg("leakage.bad_spec", role=role, given=f"a mapping without {', '.join(missing)}",
                                 accepted=accepted))
        seqs = {n: value[n] for n in names}
    elif isinstance(value, (list, tuple)) and len(value) == len(names) and all(
            not isinstance(v, (str, bytes)) and hasattr(v, "__len__") for v in value):
        seqs = dict(zip(names, value))
    else:
        raise TypeError(msg("leakage.bad_spec", role=role, given=_describe(value), accepted=accepted))
    for s in sources:
        seq = seqs[s.name]
        seq = list(seq.tolist()) if hasattr(seq, "tolist") else list(seq)
        seqs[s.name] = seq
        if s.n is not None and len(seq) != s.n:
            raise ValueError(msg("leakage.spec_length", role=role, name=s.name, got=len(seq), rows=s.n))
    return Spec(role, seqs=seqs)
