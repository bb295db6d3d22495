"""Overlapping windows across splits (issue 25): samples cut from one series with a sliding window
(`x = series[t - 4:t]` for every t), shuffled, then split. No sample is in two splits, by index or
by content, yet every validation window shares most of its time steps with training windows one
step to either side: the model is evaluated on what it was trained on.

Here a loader's float samples of shape `(A, B)` (a window of `B` steps of `A` series, or of `A`
steps of `B` features) are also known, in their first epoch, by the digest of every slice along
each of their two axes (`slice_keys`: one digest per time step's vector, on the device, with the
loader's row digests; a constant slice, such as padding, digests to 0 and never matches). At the
end an evaluation sample overlaps training when at least half of its non-constant slices along
one axis are slices of training samples. An error when at least `MIN_SAMPLES` samples and
`SHARE` of them overlap, and three times the rate at which slices recur in another evaluation
sample at a place that is not the same stretch (`_streams.cross_chance`: categorical or
quantized values repeat by themselves). Samples of rank 2 (a window of a multivariate
series), and of rank 3 along their first axis (a window of per-step feature maps: `(steps,
channels, bands)`; session 11); univariate windows (rank 1) are not judged this way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._leakage._runtime._fingerprint import dense_keys
from ._streams import cross_chance

if TYPE_CHECKING:
    from ._epochs import Loader

MIN_SAMPLES = 8
MIN_POSITIONS = 3  # a window of fewer steps shares "most" of them through one slice
RUN = 4  # consecutive slices compared when single slices recur by themselves (a vocabulary of vectors)
SHARE = 0.5  # most windows: a split in time shares only the lookback at its border (legitimate context)


def slice_keys(t: torch.Tensor) -> dict[int, torch.Tensor]:
    """Per axis of a `(rows, A, B)` float batch: `(rows, positions)` digests of its slices (0 for
    a constant slice). A batch of samples of rank 3 or more (`(rows, steps, channels, bands)`:
    features computed per time step of a window) along its first sample axis only."""
    out: dict[int, torch.Tensor] = {}
    x = t.detach()
    for axis in ((1, 2) if x.dim() == 3 else (1,)):
        s = x.movedim(axis, 1)
        rows, positions = s.shape[0], s.shape[1]
        flat = s.reshape(rows * positions, -1)
        keys = dense_keys(flat)
        constant = flat.amax(1) == flat.amin(1)
        out[axis] = torch.where(constant, torch.zeros_like(keys), keys).reshape(rows, positions)
    return out


def by_windows(e: Loader, t: Loader) -> dict[str, Any] | None:
    """The overlap of evaluation loader `e`'s windows with training loader `t`'s, or None."""
    for axis in (2, 1):
        ev, tr = e.slices.get(axis), t.slices.get(axis)
        if not ev or not tr:
            continue
        rows = torch.cat([k.to(ev[0].device) for k in ev]).cpu().numpy()  # the one read, at the end
        train = torch.cat([k.to(tr[0].device) for k in tr]).cpu().numpy()
        for run in (1, RUN):
            found = _overlap(rows, train, run)
            if found is not None:
                return {**found, "axis": axis, "run": run}
    return None


def runs(keys: np.ndarray, run: int) -> np.ndarray:
    """`(rows, positions - run + 1)` digests of `run` consecutive slice digests (0 when one of
    them is constant): a stretch of several positions, where one position's vector is a token of
    a vocabulary (a gene's, a word's embedding) that recurs by itself."""
    if run == 1:
        return keys
    width = keys.shape[1] - run + 1
    out = np.zeros((keys.shape[0], width), dtype=np.uint64)
    dead = np.zeros((keys.shape[0], width), dtype=bool)
    with np.errstate(over="ignore"):
        for j in range(run):
            part = keys[:, j:j + width]
            out = out * np.uint64(0x100000001B3) ^ part.astype(np.uint64)
            dead |= part == 0
    out = out.view(np.int64)
    out[dead] = 0
    out[(out == 0) & ~dead] = 1
    return out


def _overlap(rows: np.ndarray, train: np.ndarray, run: int) -> dict[str, Any] | None:
    if rows.shape[1] < max(MIN_POSITIONS, run + 1):
        return None  # (2 positions, e.g. a value and a calendar channel: one periodic slice is "half")
    rows, train = runs(rows, run), runs(train, run)
    live = rows != 0
    hit = np.isin(rows, np.unique(train[train != 0])) & live
    per_live, per_hit = live.sum(1), hit.sum(1)
    judged = per_live > 0
    overlaps = judged & (2 * per_hit >= per_live) & (per_hit >= 2)
    count, n = int(overlaps.sum()), int(judged.sum())
    if count < MIN_SAMPLES or count < SHARE * n:
        return None
    # constant slices get ids of their own: no chance repeats between them
    own = np.where(live, rows, -1 - np.arange(rows.size, dtype=rows.dtype).reshape(rows.shape))
    chance = cross_chance([own])
    if count < 3 * chance * n:
        return None
    return {"count": count, "n": n, "example": int(np.flatnonzero(overlaps)[0]),
            "positions": int(rows.shape[1]), "slices_shared": round(float(hit.sum()) / max(int(live.sum()), 1), 4),
            "repeat_rate_across_evaluation": round(chance, 4)}
