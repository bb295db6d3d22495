"""Near duplicates without keeping rows: fixed-size signatures plus banded lookup (LSH).

* text: character 5-gram shingles of the lower-cased, whitespace-collapsed text; a 64-value
  MinHash (multiply-shift hashes of crc32 shingle ids); 16 bands of 4 values. Similarity is the
  share of equal MinHash values, an estimate of the shingles' Jaccard similarity.
* numbers (table rows, arrays, images): the vector is reduced (images average-pooled to 8×8,
  long vectors to 64 values) and normalized (table columns by train's mean/std; arrays and
  images per sample, so brightness/contrast changes still match), then a 128-bit SimHash
  (signs of 128 fixed random projections). Similarity is the share of equal bits, 1 - angle/pi.
  The bands follow the threshold (`sim_widths`): a threshold that allows k differing bits
  (k <= 3) splits the 128 bits into k + 1 bands, so every pair that scores at or above it
  shares a band (pigeonhole): 3 bands of 43 bits at the default 0.98 (k = 2).

Thresholds by kind (`default_threshold`): 0.9 for texts (Jaccard of shingles), 0.98 for
numbers (at most 2 of 128 bits differ, about 3 degrees). SimHash 0.9 is an 18-degree cone:
on millions of low-dimensional rows most test rows have an unrelated train row that close
(or within 30 degrees and scored 0.9 by the estimate's noise), and 32-bit bands make pairs of
rows 35-60 degrees apart candidates, a number that grows with the square of the rows.
Below 0.977 the numbers keep 4 bands of 32 bits and the counts are lower bounds (recall
falls as the similarity nears the threshold); texts always use 16 bands of 4 values.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import numpy as np

from ._hashing import mix

NUM_PERM, TEXT_BANDS = 64, 16
SIM_BITS, SIM_BANDS = 128, 4
MAX_DIM = 64
MIN_DIM = 8  # fewer values than this: near matches are expected, not leakage
DEFAULT_THRESHOLD = {"text": 0.9, "num": 0.98}
_rng = np.random.default_rng(0x6C65616B)  # fixed: signatures must agree across processes
_A = (_rng.integers(1, 2**63, NUM_PERM, dtype=np.uint64) | np.uint64(1))
_B = _rng.integers(0, 2**63, NUM_PERM, dtype=np.uint64)
_PLANES: dict[int, np.ndarray] = {}
_WS = re.compile(r"\s+")


def text_signature(text: str) -> np.ndarray:
    """MinHash of a text: 64 uint32 values."""
    t = _WS.sub(" ", text.lower()).strip()
    shingles = {t[i:i + 5] for i in range(max(1, len(t) - 4))}
    ids = np.fromiter((zlib.crc32(s.encode("utf-8", "surrogatepass")) for s in shingles), dtype=np.uint64,
                      count=len(shingles))
    hashed = (ids[:, None] * _A[None, :] + _B[None, :]) >> np.uint64(32)
    return hashed.min(axis=0).astype(np.uint32)


def text_bands(sigs: np.ndarray) -> np.ndarray:
    """(n, 64) MinHash → (n, 16) uint64 band keys."""
    rows = NUM_PERM // TEXT_BANDS
    s = sigs.astype(np.uint64).reshape(len(sigs), TEXT_BANDS, rows)
    h = np.zeros(s.shape[:2], dtype=np.uint64)
    for r in range(rows):
        h = mix(h ^ s[:, :, r] ^ np.uint64(r + 1))
    return h


def reduce_images(block: np.ndarray) -> np.ndarray:
    """(n, ...) images or arrays → (n, ≤64) float64 vectors (channel mean, 8×8 average pool)."""
    n = block.shape[0]
    x = np.asarray(block, dtype=np.float64)
    if x.ndim == 4 and x.shape[-1] in (1, 3, 4) and x.shape[1] > 4:  # NHWC → NCHW
        x = x.transpose(0, 3, 1, 2)
    if x.ndim >= 3:
        x = x.reshape(n, -1, x.shape[-2], x.shape[-1]).mean(axis=1)
        import torch
        import torch.nn.functional as F

        pooled = F.adaptive_avg_pool2d(torch.from_numpy(x)[:, None], (min(8, x.shape[-2]), min(8, x.shape[-1])))
        return pooled.reshape(n, -1).numpy()
    x = x.reshape(n, -1)
    if x.shape[1] > MAX_DIM:
        import torch
        import torch.nn.functional as F

        return F.adaptive_avg_pool1d(torch.from_numpy(x)[:, None], MAX_DIM).reshape(n, -1).numpy()
    return x


def per_sample_normalize(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """z-score each row; rows that are constant carry no shape to compare (valid=False)."""
    mu = v.mean(axis=1, keepdims=True)
    sd = v.std(axis=1, keepdims=True)
    valid = (sd[:, 0] > 1e-12) & np.isfinite(sd[:, 0])
    return (v - mu) / np.where(sd > 1e-12, sd, 1.0), valid


def default_threshold(kind: str | None, given: float | None) -> float:
    """The similarity threshold of one kind of signature: `given`, else the kind's default."""
    return float(given) if given is not None else DEFAULT_THRESHOLD.get(kind or "num", 0.9)


def _planes(d: int) -> np.ndarray:
    planes = _PLANES.get(d)
    if planes is None:
        planes = np.random.default_rng(1000 + d).standard_normal((d, SIM_BITS))
        _PLANES[d] = planes
    return planes


def simhash(v: np.ndarray, center: np.ndarray | None = None, scale: np.ndarray | None = None) -> np.ndarray:
    """(n, d) float vectors → (n, 2) uint64 SimHash bits of ``(v - center) / scale``.

    The projection is a float32 einsum, not a BLAS matrix product: one thread, the same sums
    for a row whatever the chunk it comes in (engines chunk differently), and no BLAS threads
    spinning against other processes on a loaded machine (a float64 BLAS product was 60% of
    the scan there). Missing cells count as the center.
    """
    planes = _planes(v.shape[1])
    if center is not None and scale is not None:  # standardization folded into the planes
        planes = planes / scale[:, None]
        x = np.where(np.isnan(v), center, v) - center
    else:
        x = np.nan_to_num(v)
    x = np.clip(x, -3e38, 3e38).astype(np.float32)  # float32 sums: half the time; signs differ only at ~0
    bits = np.einsum("ij,jk->ik", x, planes.astype(np.float32)) > 0
    return np.packbits(bits, axis=1).view(np.uint64).reshape(len(v), SIM_BITS // 64)


def sim_widths(threshold: float) -> tuple[int, ...]:
    """Bits per band for a SimHash threshold: k + 1 bands when at most k bits may differ.

    Pigeonhole: two signatures with at most k differing bits agree on one of k + 1 bands, so
    the search finds every pair that scores at or above the threshold. k >= 3 keeps 4 bands of
    32 bits (narrower bands make buckets of unrelated rows); k = 0 uses 2 bands of 64 bits.
    """
    k = int(np.floor((1.0 - threshold) * SIM_BITS + 1e-9))
    bands = max(2, min(k + 1, 4))
    return tuple(SIM_BITS // bands + (1 if i < SIM_BITS % bands else 0) for i in range(bands))


def sim_bands(sh: np.ndarray, threshold: float = 0.9) -> np.ndarray:
    """(n, 2) uint64 → (n, bands) uint64 keys: consecutive bit ranges of `sim_widths(threshold)`."""
    w0, w1 = sh[:, 0], sh[:, 1]
    out, o = [], 0
    for w in sim_widths(threshold):
        if o >= 64:
            v = w1 >> np.uint64(o - 64)
        elif o + w <= 64:
            v = w0 >> np.uint64(o)
        else:
            v = (w0 >> np.uint64(o)) | (w1 << np.uint64(64 - o))
        out.append(v & np.uint64((1 << w) - 1) if w < 64 else v)
        o += w
    return np.stack(out, axis=1) if out else np.zeros((len(sh), 0), np.uint64)


def band_keys(kind: str, sigs: np.ndarray, threshold: float) -> np.ndarray:
    """The LSH band keys of a kind's signatures (texts: 16 MinHash bands; numbers: `sim_bands`)."""
    return text_bands(sigs) if kind == "text" else sim_bands(sigs, threshold)


def pairs_by_bands(ka: np.ndarray, kb: np.ndarray, cap: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (i in a, j in b) sharing at least one band key; each key yields at most `cap` a's."""
    found: list[np.ndarray] = []
    nb = len(kb)
    for band in range(ka.shape[1]):
        order = np.argsort(ka[:, band], kind="stable")
        sa = ka[order, band]
        left = np.searchsorted(sa, kb[:, band], "left")
        cnt = np.minimum(np.searchsorted(sa, kb[:, band], "right") - left, cap)
        hit = np.nonzero(cnt)[0]
        if not len(hit):
            continue
        reps = cnt[hit]
        jb = np.repeat(hit, reps)
        offs = np.arange(len(jb)) - np.repeat(np.cumsum(reps) - reps, reps)
        ia = order[left[jb] + offs]
        found.append(ia.astype(np.int64) * nb + jb)
    if not found:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    flat = np.unique(np.concatenate(found))
    return flat // nb, flat % nb


def similarity(kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise similarity of two signature arrays of the same kind."""
    if kind == "text":
        return (a == b).mean(axis=1)
    x = a ^ b
    if hasattr(np, "bitwise_count"):
        diff = np.bitwise_count(x).sum(axis=1)
    else:  # numpy < 2.0
        diff = np.unpackbits(x.view(np.uint8), axis=1).sum(axis=1)
    return 1.0 - diff / SIM_BITS


def text_of(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None
