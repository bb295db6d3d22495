"""Findings from a store's answers: the same findings whatever engine answered (issue 17).

Order (cheapest and most certain first): group overlap → time order → exact duplicates across
splits → duplicates inside test → conflicting labels → near duplicates.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

import numpy as np

from .._catalogue import msg
from .._findings import Finding, from_catalogue
from ._near import default_threshold
from ._scan import Scan
from ._sources import Source, sample_input
from ._store import MAX_EXAMPLES, Store

__all__ = ["MAX_EXAMPLES", "compare", "finding"]


def finding(code: str, severity: str, key: str, evidence: dict[str, Any], **fields: Any) -> Finding:
    return from_catalogue("data", f"data.{code}", f"leakage.{key}.message", fields=fields,
                          cause_key=f"leakage.{key}.cause", next_key=f"leakage.{key}.next", evidence=evidence,
                          severity=severity, stage="data")


def _pct(count: int, n: int) -> str:
    return f"{100.0 * count / max(n, 1):.1f}%"


def _pairs(names: list[str]) -> list[tuple[str, str]]:
    """(earlier, later) split pairs: train/test, train/val, val/test."""
    out = [("train", "test")]
    if "val" in names:
        out += [("train", "val"), ("val", "test")]
    return out


def compare(store: Store, scans: list[Scan], groups_spec: Any, *, near: bool, threshold: float | None,
            timed: bool) -> list[Finding]:
    by = {s.source.name: s for s in scans}
    pairs = _pairs(list(by))
    out: list[Finding] = []
    for a, b in pairs:
        out += _group_overlap(store, a, b, groups_spec)
    if timed:
        for a, b in pairs:
            out += _time_order(store, by[a], by[b])
    for a, b in pairs:
        out += _exact(store, by[a], by[b])
    out += _inside(store, by["test"])
    out += _conflicts(store, scans)
    if near:
        for a, b in pairs:
            out += _near_dups(store, by[a], by[b], threshold)
    return out


def _group_overlap(store: Store, an: str, bn: str, spec: Any) -> list[Finding]:
    if not store.has_groups(an) or not store.has_groups(bn):
        return []
    g = store.group_overlap(an, bn)
    if g is None:
        return []
    column = spec if isinstance(spec, str) else "groups"
    return [finding("group_overlap", "error", "group", {
        "pair": f"{an}/{bn}", "groups": g.common, "overlapping_groups": g.count,
        f"groups_in_{an}": g.groups_a, f"groups_in_{bn}": g.groups_b,
        f"rows_in_{an}": g.rows_a, f"rows_in_{bn}": g.rows_b},
        a=an, b=bn, count=g.count, column=column, examples=", ".join(map(repr, g.common[:3])))]


def _when(x: float, dates: bool) -> Any:
    if dates:
        return _dt.datetime.fromtimestamp(x, _dt.timezone.utc).isoformat().replace("+00:00", "Z")
    return float(x)


def _time_order(store: Store, a: Scan, b: Scan) -> list[Finding]:
    an, bn = a.source.name, b.source.name
    if not store.has_times(an) or not store.has_times(bn):
        return []
    t = store.time_order(an, bn)
    if t is None:
        return []
    dates = bool(a.times_are_dates)
    return [finding("time_overlap", "error", "time", {
        "pair": f"{an}/{bn}", f"{an}_end": _when(t.end_a, dates), f"{bn}_start": _when(t.start_b, dates),
        "earlier_rows": t.early, "share": _pct(t.early, b.n),
        "examples": [{"row": i, "time": _when(x, dates)} for i, x in t.examples]},
        a=an, b=bn, count=t.early, n=b.n, share=_pct(t.early, b.n))]


def _preview(src: Source, i: int) -> str | None:
    try:
        row = src.fetch(int(i))
    except Exception:  # a preview is a courtesy; never fail the check for it
        return None
    if row is None:
        return None
    x = sample_input(row, type(src.root).__name__ == "_ListDataset") if src.kind == "samples" else row
    text = x if isinstance(x, str) else repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _same_dataset(a: Source, b: Source) -> bool:
    """Two splits that index one dataset (Subsets, random_split, samplers of one DataLoader)."""
    return (a.kind == "samples" and a.root is not None and a.root is b.root
            and type(a.root).__name__ != "_ListDataset" and a.indices is not None and b.indices is not None)


def _exact(store: Store, a: Scan, b: Scan) -> list[Finding]:
    if not a.n or not b.n:
        return []
    an, bn = a.source.name, b.source.name
    exclude = None
    if _same_dataset(a.source, b.source):
        # Rows that are the very same index of one dataset: subset_index_overlap said so already.
        assert a.source.indices is not None and b.source.indices is not None  # _same_dataset checked
        exclude = np.isin(b.source.indices, a.source.indices)
    m = store.exact(an, bn, exclude)
    if not m.count:
        return []
    ex = []
    for i, j in m.examples:
        e: dict[str, Any] = {an: i, bn: j}
        p = _preview(b.source, j)
        if p is not None:
            e["input"] = p
        ex.append(e)
    return [finding("exact_duplicate", "warning", "exact", {
        "pair": f"{an}/{bn}", "duplicated_rows": m.count, f"rows_in_{bn}": b.n,
        "share": _pct(m.count, b.n), "examples": ex},
        a=an, b=bn, count=m.count, n=b.n, share=_pct(m.count, b.n))]


def _inside(store: Store, t: Scan) -> list[Finding]:
    if t.n < 2:
        return []
    r = store.repeats(t.source.name)
    if not r.repeated:
        return []
    name = t.source.name
    return [finding("test_duplicate", "warning", "inside", {
        "split": name, "repeated_rows": r.repeated, "inputs_repeated": r.inputs, "rows": t.n,
        "examples": r.examples}, split=name, count=r.repeated, distinct=r.inputs)]


def _conflicts(store: Store, scans: list[Scan]) -> list[Finding]:
    names = [s.source.name for s in scans]
    if not all(store.has_labels(n) for n in names) or not sum(s.n for s in scans):
        return []
    c = store.conflicts(names)
    if not c.count:
        return []
    shown: dict[int, str] = {}
    for s in scans:
        shown.update(s.label_shown)
    # A label is a word (the engine kept digests only) or already its display text (dask).
    examples = [[{"row": f"{names[k]}[{row}]", "label": lab if isinstance(lab, str) else shown.get(lab, "?")}
                 for k, row, lab in ex] for ex in c.examples]
    return [finding("conflicting_labels", "warning", "conflict", {
        "inputs_with_conflicting_labels": c.count, "examples": examples}, count=c.count)]


def _near_dups(store: Store, a: Scan, b: Scan, given: float | None) -> list[Finding]:
    an, bn = a.source.name, b.source.name
    kind = store.near_kind(an)
    if kind is None or kind != store.near_kind(bn):
        return []
    threshold = default_threshold(kind, given)
    r = store.near(an, bn, threshold)
    if not r.rows:
        return []
    ex = []
    for i, j, sim in r.examples:
        e: dict[str, Any] = {an: i, bn: j, "similarity": round(sim, 3)}
        for side, src, k in ((an, a.source, i), (bn, b.source, j)):
            p = _preview(src, k) if kind == "text" else None
            if p is not None:
                e[f"{side}_input"] = p
        ex.append(e)
    what = msg("leakage.near.kind_text" if kind == "text" else "leakage.near.kind_num")
    return [finding("near_duplicate", "warning", "near", {
        "pair": f"{an}/{bn}", "rows_with_near_duplicate": r.rows, f"rows_in_{bn}": b.n,
        "share": _pct(r.rows, b.n), "threshold": threshold, "measure": what, "examples": ex},
        a=an, b=bn, count=r.rows, n=b.n, threshold=threshold, what=what)]
