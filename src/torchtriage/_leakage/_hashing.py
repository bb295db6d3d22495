"""Canonical content digests: 8 bytes per row, equal values → equal digests, across dtypes.

Two paths, each used for every split of one check so that digests are comparable:

* rows of a table or an array (vectorized): every cell becomes a 64-bit word — a number is the
  bit pattern of its float64 value (``-0.0`` folded into ``0.0``, one NaN), any other cell a
  blake2b digest of a typed canonical byte string — and the words of a row are folded with a
  splitmix64 mixer seeded by the row's shape. int 3, float32 3.0 and the CSV text "3" match.
* whole samples (a Dataset item, a list element): blake2b over a typed canonical byte string:
  arrays and tensors as shape + float64 bytes, strings as UTF-8, bytes and files (a
  ``pathlib.Path``) by their bytes, tuples/dicts by their parts.

Digests are kept as numpy ``uint64`` arrays, never the rows (issue 6, "Scale").
"""

from __future__ import annotations

import hashlib
import math
import os
import pathlib
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic; arrays never warn)."""
    x = x ^ (x >> _S30)
    x = x * _M1
    x = x ^ (x >> _S27)
    x = x * _M2
    return x ^ (x >> _S31)


def _b2(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def float_words(values: np.ndarray) -> np.ndarray:
    """Numbers as canonical 64-bit words: float64 bits, one zero, one NaN."""
    v = np.asarray(values, dtype=np.float64) + 0.0  # + 0.0 folds -0.0 into 0.0
    nan = np.isnan(v)
    if nan.any():
        v = np.where(nan, np.nan, v)
    return np.ascontiguousarray(v).view(np.uint64)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    return None


def parse_number(text: str) -> float | None:
    """A CSV cell as a number when it is one ("" is missing → NaN), else None."""
    s = text.strip()
    if not s:
        return math.nan
    try:
        return float(s)
    except ValueError:
        return None


def cell_word(value: Any) -> int:
    """One table cell as a 64-bit word, matching `float_words` for numbers."""
    num = _number(value)
    if num is None and value is None:
        num = math.nan
    if num is None and isinstance(value, str):
        num = parse_number(value)
    if num is not None:
        return int(float_words(np.array([num]))[0])
    return _b2(canonical_bytes(value))


def object_words(cells: Any) -> np.ndarray:
    """A column of arbitrary cells (strings, numbers, None) as 64-bit words."""
    try:
        arr = np.asarray(cells, dtype=np.float64)  # fast path: numbers or numeric strings
        return float_words(arr)
    except (ValueError, TypeError):
        return np.fromiter((cell_word(c) for c in cells), dtype=np.uint64, count=len(cells))


def row_digests(words: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """Fold per-column words (each of length n) into one digest per row."""
    n = len(words[0]) if words else 0
    seed = np.full(n, _b2(b"row" + struct.pack(f"<{len(shape)}q", *shape)), dtype=np.uint64)
    h = mix(seed)
    for w in words:
        h = mix((h * _GOLD) ^ w)
    return h


def array_row_digests(block: np.ndarray) -> np.ndarray:
    """Digests of the rows (dim 0) of a numeric array of any rank."""
    n = block.shape[0]
    flat = float_words(block.reshape(n, -1))
    shape = tuple(block.shape[1:])
    if flat.shape[1] <= 256:
        return row_digests([flat[:, j] for j in range(flat.shape[1])], shape)
    # Wide rows (images): one blake2b call per row over its canonical bytes is cheaper than
    # thousands of vectorized passes; the path depends only on the shape, so equal rows agree.
    head = b"wide" + struct.pack(f"<{len(shape)}q", *shape)
    return np.fromiter((_b2(head + flat[i].tobytes()) for i in range(n)), dtype=np.uint64, count=n)


def to_numpy(value: Any) -> np.ndarray | None:
    """A tensor, array or PIL image as a numpy array; None for anything else."""
    if isinstance(value, np.ndarray):
        return value
    mod = type(value).__module__
    if mod.startswith("torch") and hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    if mod.startswith("PIL") and hasattr(value, "getdata"):
        return np.asarray(value)
    return None


def canonical_bytes(value: Any) -> bytes:
    """A typed, canonical byte string for one sample (or part of one)."""
    if value is None:
        return b"N"
    if isinstance(value, str):
        return b"S" + value.encode("utf-8", "surrogatepass")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"B" + bytes(value)
    if isinstance(value, pathlib.PurePath):
        return b"B" + _file_bytes(value)
    num = _number(value)
    if num is not None:
        value = np.array(num)
    arr = to_numpy(value)
    if arr is not None:
        if arr.dtype.kind in "biuf":
            return b"A" + struct.pack(f"<{arr.ndim}q", *arr.shape) + float_words(arr).tobytes()
        if arr.dtype.kind == "c":
            return b"C" + struct.pack(f"<{arr.ndim}q", *arr.shape) + arr.astype(np.complex128).tobytes()
        return b"O" + struct.pack(f"<{arr.ndim}q", *arr.shape) + b"".join(
            canonical_bytes(x) for x in arr.reshape(-1).tolist())
    if isinstance(value, (list, tuple)):
        parts = [canonical_bytes(x) for x in value]
        return b"T" + struct.pack("<q", len(parts)) + b"".join(struct.pack("<q", len(p)) + p for p in parts)
    if isinstance(value, Mapping):
        items = sorted((str(k), canonical_bytes(v)) for k, v in value.items())
        return b"D" + b"".join(canonical_bytes(k) + struct.pack("<q", len(v)) + v for k, v in items)
    raise TypeError(
        f"cannot hash a sample part of type {type(value).__module__}.{type(value).__qualname__}; "
        "accepted: tensors, numpy arrays, numbers, str, bytes, pathlib.Path (hashed by file bytes), "
        "PIL images, and tuples/lists/dicts of these")


def _file_bytes(path: pathlib.PurePath) -> bytes:
    try:
        with open(os.fspath(path), "rb") as fh:
            return fh.read()
    except OSError as e:
        raise ValueError(f"cannot read file {os.fspath(path)!r} to hash it by content: {e.strerror}") from None


def sample_digest(value: Any) -> int:
    return _b2(canonical_bytes(value))


def file_digest(path: str) -> int:
    """A file cell: hashed by its bytes, so renamed copies match (and differ from its name)."""
    return _b2(b"B" + _file_bytes(pathlib.Path(path)))


def key_of(value: Any) -> str:
    """A group value as a display key: numbers that are whole print as ints ('7', not '7.0')."""
    if isinstance(value, str):
        return value
    num = _number(value)
    if num is None:
        arr = to_numpy(value)
        if arr is not None and arr.size == 1:
            num = float(arr.reshape(-1)[0])
    if num is not None:
        return str(int(num)) if num.is_integer() else repr(num)
    return str(value)
