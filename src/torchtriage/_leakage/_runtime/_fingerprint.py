"""Row fingerprints computed where the rows are (issue 14): one int64 per row, on the device.

The same digest family as `_hashing.py` (splitmix64's finalizer with its constants), written with
torch integer ops so that a training batch on an accelerator is hashed there, without a copy
to the host. A row's digest is the wrapping sum, over its non-zero cells, of
``cells(word, salt(column))`` (a bijection that keeps 0 at 0), finalized by one more ``mix``:
a sum over non-zero cells only, so a dense row and the same row in a scipy sparse matrix (a vectorizer's output) agree.

Canonical words: every number is compared as its float32 value (so a float64 numpy array and
the float32 tensor made from it agree, int 3 = float 3.0; ``-0.0`` is ``0.0``, one NaN; integers
beyond 2**24 are rounded to float32). Text rows (a list of str; a 2-d array of categories, its
cells joined) are hashed on the host with `_hashing.sample_digest`. Rows wider than `WIDE` values are
fingerprinted on `WIDE` (512) evenly spaced values plus the row sum (bounded cost per batch).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from .. import _hashing

WIDE = 512  # values fingerprinted per row (plus the row sum) above this width: bounded cost per batch
_CHUNK = 1 << 20  # cells hashed at once: temporaries stay near 5 int64 arrays of this size (40 MiB)


def _signed(x: np.uint64) -> int:
    v = int(x)
    return v - (1 << 64) if v >= 1 << 63 else v


_NAN = -1.0e-40  # NaN's stand-in: a float32 denormal no real feature holds
_M1, _M2, _GOLD = _signed(_hashing._M1), _signed(_hashing._M2), _signed(_hashing._GOLD)


def _lsr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's `>>` is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def mix(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finalizer on int64 (wrapping), like `_hashing.mix` on uint64."""
    x = x ^ _lsr(x, 30)
    x = x * _M1
    x = x ^ _lsr(x, 27)
    x = x * _M2
    return x ^ _lsr(x, 31)


def _salts(cols: torch.Tensor) -> torch.Tensor:
    return mix((cols + 1) * _GOLD) | 1  # odd: multiplying by it is invertible mod 2**64


_salt_cache: dict[tuple[int, torch.device], torch.Tensor] = {}


def _column_salts(width: int, device: torch.device) -> torch.Tensor:
    found = _salt_cache.get((width, device))
    if found is None:
        if len(_salt_cache) > 64:
            _salt_cache.clear()
        found = _salt_cache[(width, device)] = _salts(torch.arange(width, device=device))
    return found


def words(values: torch.Tensor) -> torch.Tensor:
    """Canonical int64 words of numbers (any dtype), elementwise: float32 bits, 0.0 for -0.0,
    one NaN; 0 stays 0."""
    if values.is_complex():
        values = values.real
    v = values.to(torch.float32)
    if values.is_floating_point():
        v = torch.nan_to_num(v, nan=_NAN, posinf=math.inf, neginf=-math.inf)
    v = v + 0.0  # -0.0 -> 0.0 (and a copy: the view below never aliases the user's tensor)
    return v.view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def cells(w: torch.Tensor, salt: torch.Tensor) -> torch.Tensor:
    """Per-cell digests: a bijection of the word for each column (odd multiplier, xorshift,
    odd multiplier) that keeps 0 at 0, so zero cells drop out of the row sum."""
    x = w * salt
    x = x ^ _lsr(x, 29)
    return x * _M2


def _finish(total: torch.Tensor, width: int) -> torch.Tensor:
    return mix(total ^ _width_word(width))


def _width_word(width: int) -> int:
    """mix(width + 7) computed on the host (Python ints), as a signed 64-bit value."""
    mask = (1 << 64) - 1
    x = width + 7
    x ^= x >> 30
    x = (x * int(_hashing._M1)) & mask
    x ^= x >> 27
    x = (x * int(_hashing._M2)) & mask
    x ^= x >> 31
    return x - (1 << 64) if x >= 1 << 63 else x


def dense_keys(x: torch.Tensor) -> torch.Tensor:
    """Digests of the rows (dim 0) of a tensor of any rank, on its device, in row chunks (the
    temporaries stay near `_CHUNK` cells whatever the size)."""
    with torch.no_grad():
        n = x.shape[0]
        flat = x.detach().reshape(n, -1)
        width = flat.shape[1]
        wide = width > WIDE
        idx = torch.linspace(0, width - 1, WIDE, device=flat.device).round().to(torch.int64) if wide else None
        cols = _column_salts(WIDE + 1 if wide else width, flat.device)
        step = max(1, _CHUNK // max(min(width, WIDE + 1), 1))
        parts = []
        for i in range(0, n, step):
            chunk = flat[i:i + step]
            if idx is not None:
                # Wide rows (images): evenly spaced values plus the row's sum over all values.
                total = chunk.sum(1, dtype=torch.float64, keepdim=True) if chunk.is_floating_point() \
                    else chunk.sum(1, dtype=torch.int64, keepdim=True)
                chunk = torch.cat([chunk.index_select(1, idx).to(total.dtype), total], 1)
            parts.append(cells(words(chunk), cols).sum(1))
        total = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64, device=x.device)
        return _finish(total, width)


def sparse_keys(matrix: Any) -> torch.Tensor:
    """Digests of the rows of a scipy sparse matrix (CSR/CSC/COO), equal to `dense_keys` of
    the dense rows (wide rows too: the same sampled columns and the row sum)."""
    csr = matrix.tocsr()
    n, width = csr.shape
    counts = np.diff(csr.indptr)
    rows = torch.from_numpy(np.repeat(np.arange(n, dtype=np.int64), counts))
    vals = torch.from_numpy(np.asarray(csr.data))
    cols = torch.from_numpy(np.asarray(csr.indices, dtype=np.int64))
    if width > WIDE:
        idx = torch.linspace(0, width - 1, WIDE).round().to(torch.int64)
        slot = torch.full((width,), -1, dtype=torch.int64)
        slot[idx] = torch.arange(WIDE)
        sums = torch.zeros(n, dtype=torch.float64).index_add_(0, rows, vals.to(torch.float64))
        keep = slot[cols] >= 0
        salts = _column_salts(WIDE + 1, torch.device("cpu"))
        h = cells(words(vals[keep]), salts[slot[cols[keep]]])
        total = torch.zeros(n, dtype=torch.int64).index_add_(0, rows[keep], h)
        total += cells(words(sums), salts[WIDE])
        return _finish(total, width)
    h = cells(words(vals), _salts(cols))
    total = torch.zeros(n, dtype=torch.int64).index_add_(0, rows, h)
    return _finish(total, width)


def text_keys(items: Any) -> torch.Tensor:
    """Digests of text rows (str/bytes), on the host."""
    vals = [_signed(np.uint64(_hashing.sample_digest(t))) for t in items]
    return torch.tensor(vals, dtype=torch.int64)


def row_keys(obj: Any) -> torch.Tensor | None:
    """Row digests of what a split or a fit was given: a tensor, a numpy array (numeric or
    text), a pandas DataFrame/Series, a scipy sparse matrix, a list of numbers or texts. None
    when the rows cannot be fingerprinted (then the rows are not compared)."""
    if isinstance(obj, torch.Tensor):
        return dense_keys(obj) if obj.dim() >= 1 and obj.shape[0] > 0 else None
    if hasattr(obj, "tocsr") and hasattr(obj, "shape"):
        return sparse_keys(obj)
    if type(obj).__module__.startswith("pandas"):
        obj = obj.to_numpy()
    if isinstance(obj, (list, tuple)):
        if obj and all(isinstance(t, (str, bytes)) for t in obj[:64]):
            return text_keys(obj)
        try:
            obj = np.asarray(obj)
        except (ValueError, TypeError):
            return None
    if isinstance(obj, np.ndarray) and obj.ndim >= 1 and obj.shape[0] > 0:
        if obj.dtype.kind in "biuf":
            return dense_keys(torch.from_numpy(np.ascontiguousarray(obj)))
        if obj.dtype.kind in "USO" and obj.ndim in (1, 2):
            try:  # a 2-d table of categories (an encoder's input): each row's cells, joined
                return text_keys(obj.tolist() if obj.ndim == 1 else ["\x1f".join(map(str, r)) for r in obj.tolist()])
            except TypeError:
                return None
    return None


def as_tensor(obj: Any) -> torch.Tensor | None:
    """A numeric 2-d view of split input for feature statistics (no copy for arrays)."""
    if isinstance(obj, torch.Tensor):
        t = obj
    elif type(obj).__module__.startswith("pandas"):
        try:
            t = torch.from_numpy(np.ascontiguousarray(obj.to_numpy(dtype=np.float64)))
        except (ValueError, TypeError):
            return None
    elif isinstance(obj, np.ndarray) and obj.dtype.kind in "biuf":
        t = torch.from_numpy(np.ascontiguousarray(obj))
    else:
        return None
    if t.dim() != 2 or t.shape[0] < 8 or not t.is_floating_point():
        return None
    return t
