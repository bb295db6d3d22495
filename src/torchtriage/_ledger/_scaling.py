"""Normalisation statistics that know the held-out rows (session 11): a mean and a standard
deviation computed over the whole data, then the data split (by time, by file, by ratio) into
loaders.

The invariant: a statistic used to transform the training inputs is computed from training
rows only. A program that standardizes with the training rows' mean and std gives training
inputs of mean 0 and std 1; one that standardizes with all rows' gives the union of its splits
mean 0 and std 1, and its training part only what the held-out rows left it. So, when a loader's
first pass begins, its samples held in memory (a `TensorDataset`'s first tensor, or a float
array attribute of the dataset's length; never through `__getitem__`) are summarized on the
host: their distinct slices along the first axis of a sample (a window's time steps: windows cut
with a stride shorter than their length hold each step once), per last-axis column and over all
cells, as count, sum and sum of squares. At the end, per model, the training loaders' and the
evaluation loaders' summaries are pooled: when the pool is standardized (|mean| and |std - 1|
within `POOL_TOL`, over all cells, or per column for every column) while the training rows are
not (their mean or std further from 0 and 1 than a random part of their size would be:
`CHANCE_SIGMAS` standard errors, and at least `TRAIN_TOL`), the held-out rows set the scale of
the training inputs: `data.preprocessing_fit_on_all` (error), with the rows, the statistic and
the training rows' mean and std.

Quiet: statistics from the training rows applied to every split (the training rows are
standardized), per-sample normalization (each sample is), fixed constants such as ImageNet's
(the pool is not standardized to 1e-2 by chance), a random split of data standardized as a whole
(the training part stays within chance of the pool). Not seen: statistics over rows no loader
delivers (a validation set scored by hand), min-max scaling, datasets that load on access.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ._make import finding
from ._make import label as _label

if TYPE_CHECKING:
    from ._epochs import Loader

MAX_CELLS = 1 << 23  # cells summarized per loader (evenly spaced samples beyond)
POOL_TOL = 0.02  # |mean| and |std - 1| of a pool standardized as a whole (window edges, dropped tails)
TRAIN_TOL = 0.1  # the training rows' |mean| or |std - 1| that the held-out rows' share moved
CHANCE_SIGMAS = 4.0
MIN_ROWS = 32
MIN_HELD_SHARE = 0.05


def _array(ds: Any, n: int) -> Any:
    tensors = getattr(ds, "tensors", None)
    fields: list[Any] = [tensors[0]] if isinstance(tensors, tuple) and tensors else []
    if not fields:
        try:
            fields = list(vars(ds).values())
        except TypeError:
            return None
    for v in fields:
        if isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.is_floating_point() and v.dim() >= 2 \
                and v.shape[0] == n:
            return v.detach()
        if isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.ndim >= 2 and v.shape[0] == n:
            return torch.from_numpy(v)
    return None


def summarize(ds: Any, n: int, to_root: np.ndarray | None) -> dict[str, Any] | None:
    """The moments of the distinct slices of the loader's samples held in memory, or None."""
    if ds is None or n < 2:
        return None
    try:
        x = _array(ds, n)
        if x is None:
            return None
        picks = np.asarray(to_root, dtype=np.int64) if to_root is not None else np.arange(n, dtype=np.int64)
        per = max(int(x[0].numel()), 1)
        if picks.size * per > MAX_CELLS:  # evenly spaced samples (the gather reads only those)
            picks = picks[np.unique(np.linspace(0, picks.size - 1, max(MAX_CELLS // per, 2)).astype(np.int64))]
        x = x[torch.from_numpy(picks)] if picks.size < n else x
        x = x.double()
        flat = x.reshape(x.shape[0] * x.shape[1], -1) if x.dim() >= 3 else x.reshape(x.shape[0], -1)
        flat = torch.unique(flat, dim=0)  # each time step once (overlapping windows)
        if not bool(torch.isfinite(flat).all()):
            return None
        cols = int(x.shape[-1])
        byc = flat.reshape(-1, cols)
        return {"rows": int(flat.shape[0]), "cells": int(flat.numel()), "sum": float(flat.sum()),
                "sumsq": float((flat * flat).sum()), "csum": byc.sum(0).numpy(), "csq": (byc * byc).sum(0).numpy(),
                "cn": int(byc.shape[0])}
    except Exception:  # (an unusual dataset: no summary, no verdict)
        return None


def _pool(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"rows": sum(p["rows"] for p in parts), "cells": sum(p["cells"] for p in parts),
            "sum": sum(p["sum"] for p in parts), "sumsq": sum(p["sumsq"] for p in parts),
            "csum": sum(p["csum"] for p in parts), "csq": sum(p["csq"] for p in parts),
            "cn": sum(p["cn"] for p in parts)}


def _global(p: dict[str, Any]) -> tuple[float, float]:
    mean = p["sum"] / max(p["cells"], 1)
    return mean, math.sqrt(max(p["sumsq"] / max(p["cells"], 1) - mean * mean, 0.0))


def _columns(p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    mean = p["csum"] / max(p["cn"], 1)
    return mean, np.sqrt(np.maximum(p["csq"] / max(p["cn"], 1) - mean * mean, 0.0))


def _standardized(p: dict[str, Any]) -> str | None:
    """How the pool is standardized ("all cells", "per column"), or None."""
    cm, cs = _columns(p)
    live = cs > 1e-6
    if cm.size >= 2 and live.sum() >= 2 and (np.abs(cm[live]) <= POOL_TOL).all() \
            and (np.abs(cs[live] - 1) <= POOL_TOL).all():
        return "per column"
    mean, std = _global(p)
    if abs(mean) <= POOL_TOL and abs(std - 1) <= POOL_TOL:
        return "all cells"
    return None


def judge(loaders: list[Loader]) -> list[Any]:
    """Per model: training rows scaled with statistics their held-out loaders set."""
    out: list[Any] = []
    done: set[int] = set()
    tokens = sorted({t for e in loaders for t in e.models})
    for token in tokens:
        train = [e for e in loaders if e.trains and token in e.models and e.moments is not None]
        held = [e for e in loaders if not e.trains and token in e.models and e.moments is not None]
        if not train or not held or any(id(e) in done for e in train):
            continue
        tm = [e.moments for e in train if e.moments is not None]
        hm = [e.moments for e in held if e.moments is not None]
        if len({p["csum"].size for p in (*tm, *hm)}) != 1:
            continue
        tp, pool = _pool(tm), _pool([*tm, *hm])
        n, m = pool["rows"], tp["rows"]
        if n < MIN_ROWS or n - m < MIN_HELD_SHARE * n:
            continue
        how = _standardized(pool)
        if how is None:
            continue
        if how == "all cells":
            tmean, tstd = _global(tp)
            dev = max(abs(tmean), abs(tstd - 1))
        else:
            cm, cs = _columns(tp)
            live = cs > 1e-6
            k = int(np.argmax(np.where(live, np.maximum(np.abs(cm), np.abs(cs - 1)), 0.0)))
            tmean, tstd = float(cm[k]), float(cs[k])
            dev = max(abs(tmean), abs(tstd - 1))
        chance = CHANCE_SIGMAS * math.sqrt(max(n - m, 0) / (max(n - 1, 1) * max(m, 1)))
        if dev <= max(TRAIN_TOL, chance):
            continue
        done.update(id(e) for e in train)
        t = train[0]
        pmean, pstd = _global(pool)
        fields = {"train": _label(t), "train_where": t.where(), "n": n, "m": m, "held": n - m,
                  "held_loaders": ", ".join(f"{_label(e)} ({e.where()})" for e in held), "how": how,
                  "tmean": f"{tmean:.3g}", "tstd": f"{tstd:.3g}"}
        evidence = {"training_loader": t.name, "training_at": t.where(),
                    "evaluation_loaders": [e.name for e in held], "evaluation_at": [e.where() for e in held],
                    "statistic": "mean and std", "standardized": how, "rows": n, "train_rows": m,
                    "held_out_rows": n - m, "pool_mean": round(pmean, 4), "pool_std": round(pstd, 4),
                    "train_mean": round(tmean, 4), "train_std": round(tstd, 4),
                    "random_split_max_deviation": round(chance, 4)}
        out.append(finding("preprocessing_fit_on_all", "scaled_with_heldout", "error", t.made or t.frame, fields,
                           evidence))
    return out


# ---------------------------------------------------------------- a mean the dataset stores
# A dataset that normalizes on access keeps its raw rows and the statistics it applies (a mean
# vector of one value per feature). The training dataset's mean should be its own rows'; one
# computed over the training rows and held-out rows is the training mean moved toward the
# held-out rows' mean, by their share, in every feature at once.
MIN_FEATURES = 4
FIT_R2 = 0.8  # the offset is the held-out direction, feature by feature


def _raw(ds: Any, n: int, to_root: np.ndarray | None) -> np.ndarray | None:
    """The dataset's raw rows `(rows, features)`: one float array of its length, or a list of its
    length of float arrays `(steps, features)` with one feature count (clips of several lengths)."""
    x = _array(ds, n)
    if x is not None:
        rows = n if to_root is None else len(to_root)
        if rows * max(int(x[0].numel()), 1) > MAX_CELLS:
            return None
        arr = x.numpy() if to_root is None else x.numpy()[np.asarray(to_root, dtype=np.int64)]
        return arr.reshape(-1, arr.shape[-1])
    try:
        fields = list(vars(ds).values())
    except TypeError:
        return None
    for v in fields:
        if isinstance(v, list) and len(v) == n and v and all(isinstance(a, np.ndarray) and a.ndim == 2
                                                             and a.dtype.kind == "f" for a in v[:64]):
            items = v if to_root is None else [v[int(i)] for i in to_root]
            if len({a.shape[1] for a in items}) != 1 or sum(a.size for a in items) > MAX_CELLS:
                return None
            return np.concatenate(items, axis=0)
    return None


def stored(ds: Any, n: int, to_root: np.ndarray | None) -> dict[str, Any] | None:
    """The raw rows' per-feature moments and the one-value-per-feature vectors the dataset holds."""
    if ds is None or n < 2:
        return None
    try:
        raw = _raw(ds, n, to_root)
        if raw is None or raw.shape[1] < MIN_FEATURES or not np.isfinite(raw).all():
            return None
        f = raw.shape[1]
        vectors = {}
        for name, v in vars(ds).items():
            if isinstance(v, torch.Tensor):
                v = v.detach().cpu().numpy() if v.device.type == "cpu" or v.numel() <= 4096 else None
            if isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.shape == (f,):
                vectors[name] = v.astype(np.float64)
        r = raw.astype(np.float64)
        return {"rows": int(r.shape[0]), "mean": r.mean(0), "std": r.std(0), "vectors": vectors}
    except Exception:  # (an unusual dataset: no verdict)
        return None


def judge_stored(loaders: list[Loader]) -> list[Any]:
    """Per model: a training dataset whose stored mean is its rows' mean moved toward the held-out rows'."""
    out: list[Any] = []
    tokens = sorted({t for e in loaders for t in e.models})
    for token in tokens:
        train = [e for e in loaders if e.trains and token in e.models and e.stored and e.stored["vectors"]]
        held = [e for e in loaders if not e.trains and token in e.models and e.stored]
        for t in train[:1]:
            ts = t.stored
            assert ts is not None
            for e in held:
                es = e.stored
                assert es is not None
                if es["mean"].shape != ts["mean"].shape:
                    continue
                found = _moved(ts, es)
                if found is None:
                    continue
                name, alpha, r2, shift = found
                fields = {"train": _label(t), "train_where": t.where(), "attr": name, "m": ts["rows"],
                          "held": es["rows"], "eval": _label(e), "eval_where": e.where(),
                          "share": f"{100 * alpha:.0f}%", "shift": f"{shift:.3g}"}
                evidence = {"training_loader": t.name, "training_at": t.where(), "evaluation_loader": e.name,
                            "evaluation_at": e.where(), "statistic": name, "features": int(ts["mean"].size),
                            "train_rows": ts["rows"], "evaluation_rows": es["rows"],
                            "held_out_weight": round(alpha, 4), "fit_r2": round(r2, 4),
                            "max_shift_in_train_std": round(shift, 4)}
                out.append(finding("preprocessing_fit_on_all", "stored_mean_with_heldout", "error", t.made or t.frame,
                                   fields, evidence, cause="scaled_with_heldout"))
                return out
    return out


def _moved(ts: dict[str, Any], es: dict[str, Any]) -> tuple[str, float, float, float] | None:
    scale = np.where(ts["std"] > 1e-12, ts["std"], np.inf)
    e = es["mean"] - ts["mean"]  # the held-out rows' offset (fitted in the data's units: a division
    if np.abs(e / scale).max() < TRAIN_TOL:  # by the training std would line any two vectors up)
        return None  # the held-out rows look like the training rows: no direction to tell
    ec = e - e.mean()
    if np.linalg.norm(ec) < 0.1 * np.linalg.norm(e):
        return None  # shifted alike in every feature: a constant vector would line up with it
    for name, v in ts["vectors"].items():
        d = v - ts["mean"]
        shift = float(np.abs(d / scale).max())
        if shift <= TRAIN_TOL:
            continue  # the training rows' own mean (or within a tenth of a std of it)
        alpha, r2 = _fit(d, e)
        # The same share must hold feature by feature, not only on average.
        alpha_c, r2_c = _fit(d - d.mean(), ec)
        if 0.0 < alpha <= 1.0 and r2 >= FIT_R2 and r2_c >= FIT_R2 and abs(alpha_c - alpha) <= 0.25 * alpha:
            return name, alpha, r2_c, shift
    return None


def _fit(d: np.ndarray, e: np.ndarray) -> tuple[float, float]:
    """`d ≈ alpha e`: alpha and the share of `d` it explains."""
    alpha = float(d @ e / max(float(e @ e), 1e-300))
    return alpha, 1.0 - float(((d - alpha * e) ** 2).sum() / max(float(d @ d), 1e-300))
