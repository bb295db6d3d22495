"""Preprocessing fitted before the split (seed G.5): a normalizer whose statistics equal those
of all splits together rather than train's, and a vocabulary holding tokens found only in test.

Statistics come from the split scans (`_scan.Stats`); nothing is re-read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .._catalogue import msg
from .._findings import Finding, from_catalogue

VOCAB_ATTRS = ("vocabulary_", "stoi", "word_index", "token2id", "word2idx", "token_to_idx")


def _arr(x: Any) -> np.ndarray | None:
    if x is None:
        return None
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    try:
        a = np.asarray(x, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        return None
    return a if a.size else None


def normalizer_stats(obj: Any) -> dict[str, np.ndarray] | None:
    """{"mean", "std", "min", "max"} a fitted normalizer holds, or None when it is not one."""
    if isinstance(obj, tuple) and len(obj) == 2 and all(_arr(v) is not None for v in obj):
        return {"mean": _arr(obj[0]), "std": _arr(obj[1])}  # type: ignore[dict-item]
    if isinstance(obj, Mapping) and ("mean" in obj or "std" in obj):
        return {k: a for k in ("mean", "std") if (a := _arr(obj.get(k))) is not None} or None
    out: dict[str, np.ndarray] = {}
    # MaxAbsScaler's scale_ is max|x| and RobustScaler's is an IQR: not a standard deviation.
    # RobustScaler's median / IQR need a sort, not a streaming pass: it is not checked.
    std_attrs = ("std_", "std") if hasattr(obj, "max_abs_") or hasattr(obj, "center_") else ("scale_", "std_", "std")
    for name, attrs in (("mean", ("mean_", "mean")), ("std", std_attrs), ("maxabs", ("max_abs_",)),
                        ("var", ("var_",)), ("min", ("data_min_",)), ("max", ("data_max_",))):
        for attr in attrs:
            v = _arr(getattr(obj, attr, None)) if not callable(getattr(obj, attr, None)) else None
            if v is not None:
                out[name] = v
                break
    if "var" in out:
        out.setdefault("std", np.sqrt(out["var"]))
        del out["var"]
    return out or None


def vocabulary(obj: Any) -> set[str] | None:
    """The tokens of a vocabulary (dict, set/list of str, or an object holding one), or None."""
    if isinstance(obj, Mapping) and obj and all(isinstance(k, str) for k in obj):
        if not {"mean", "std"} & set(obj):
            return set(obj)
    if isinstance(obj, (set, frozenset, list)) and obj and all(isinstance(k, str) for k in obj):
        return set(obj)
    for a in VOCAB_ATTRS:
        v = getattr(obj, a, None)
        if isinstance(v, Mapping):
            return {str(k) for k in v}
    for meth in ("get_stoi", "get_vocab"):
        f = getattr(obj, meth, None)
        if callable(f):
            v = f()
            if isinstance(v, Mapping):
                return {str(k) for k in v}
    return None


def _moments(acc: list[np.ndarray]) -> dict[str, np.ndarray]:
    cnt, s1, s2, mn, mx = acc
    cnt = np.maximum(cnt, 1)
    mean = s1 / cnt
    var0 = np.maximum(s2 / cnt - mean * mean, 0)
    var1 = var0 * cnt / np.maximum(cnt - 1, 1)
    return {"mean": mean, "std": np.sqrt(var0), "std1": np.sqrt(var1), "min": mn, "max": mx,
            "maxabs": np.fmax(np.abs(mn), np.abs(mx))}


def _sum(accs: list[list[np.ndarray]]) -> list[np.ndarray]:
    out = [a.copy() for a in accs[0]]
    for acc in accs[1:]:
        out = [out[0] + acc[0], out[1] + acc[1], out[2] + acc[2], np.fmin(out[3], acc[3]), np.fmax(out[4], acc[4])]
    return out


def check_normalizer(obj: Any, stats: dict[str, np.ndarray], scans: list[Any], train: str) -> Finding | None:
    """A finding when `stats` equal all-data statistics and differ from train's."""
    layouts = [lay for lay, acc in scans[0].stats.acc.items()
               if len(acc[0]) and all(lay in s.stats.acc and len(s.stats.acc[lay][0]) == len(acc[0]) for s in scans)]
    k = {len(v) for v in stats.values()}
    if len(k) != 1:
        return None
    width = k.pop()
    cands = [lay for lay in layouts if len(scans[0].stats.acc[lay][0]) == width]
    if not cands:
        widths = sorted({len(scans[0].stats.acc[lay][0]) for lay in layouts})
        raise ValueError(msg("leakage.prep_width", what=type(obj).__name__, width=width,
                             widths=", ".join(map(str, widths)) or "none (no numeric input)"))
    for lay in cands:
        tr = _moments(scans[0].stats.acc[lay])
        al = _moments(_sum([s.stats.acc[lay] for s in scans]))
        for factor in (1.0, 1 / 255.0):  # ToTensor() scales uint8 images by 1/255 before Normalize
            hit = _compare(stats, tr, al, factor)
            if hit is not None:
                name, fitted, train_v, all_v = hit
                return from_catalogue(
                    "data", "data.preprocessing_fit_on_all", "leakage.prep.message",
                    fields={"what": type(obj).__name__, "stat": name, "train": train},
                    cause_key="leakage.prep.cause", next_key="leakage.prep.next",
                    severity="error", stage="data", op=type(obj).__name__,
                    evidence={"preprocessor": type(obj).__name__, "statistic": name, "layout": lay,
                              "fitted": _short(fitted), "all_splits": _short(all_v), f"{train}_only": _short(train_v),
                              "max_gap_to_all": float(np.max(np.abs(fitted - all_v))),
                              f"max_gap_to_{train}": float(np.max(np.abs(fitted - train_v)))})
    return None


def _short(a: np.ndarray) -> list[float]:
    return [float(f"{x:.6g}") for x in a[:8]]


def _compare(stats: dict[str, np.ndarray], tr: dict[str, np.ndarray], al: dict[str, np.ndarray],
             factor: float) -> tuple[str, np.ndarray, np.ndarray, np.ndarray] | None:
    scale = np.maximum(al["std"] * factor, 1e-12)
    found = None
    for name, fitted in stats.items():
        variants = ("std", "std1") if name == "std" else (name,)
        for var in variants:
            a, t = al[var] * factor, tr[var] * factor
            tol = 1e-5 * np.maximum(np.abs(a), 1.0) * factor + 1e-4 * scale
            if np.all(np.abs(fitted - t) <= tol):
                return None  # it matches train: fitted on train only, as it should be
            if np.all(np.abs(fitted - a) <= tol) and np.any(np.abs(t - a) > 10 * tol):
                found = found or (name, fitted, t, a)
    return found


def check_vocabulary(obj: Any, vocab: set[str], scans: list[Any], train: str) -> list[Finding]:
    def forms(tokens: set[str]) -> set[str]:
        return tokens | {t.lower() for t in tokens}

    seen_train = forms(scans[0].tokens)
    everything = set(seen_train)
    for s in scans[1:]:
        everything |= forms(s.tokens)
    if not vocab or not everything:
        return []
    # A vocabulary learned elsewhere (a pretrained tokenizer) holds many tokens found in no
    # split; only one built from these splits says something about the split.
    foreign = [v for v in vocab if v not in everything]
    if len(foreign) > max(10, 0.05 * len(vocab)):
        return []
    out = []
    for s in scans[1:]:
        only = sorted(v for v in vocab if v in forms(s.tokens) and v not in seen_train)
        if only:
            name = s.source.name
            out.append(from_catalogue(
                "data", "data.vocabulary_from_test", "leakage.vocab.message",
                fields={"count": len(only), "split": name, "train": train},
                cause_key="leakage.vocab.cause", next_key="leakage.vocab.next",
                severity="error", stage="data", op=type(obj).__name__,
                evidence={"pair": f"{train}/{name}", "tokens": only[:10], "count": len(only),
                          "vocabulary_size": len(vocab)}))
    return out
