"""`check_splits`: scan every split once, then compare the scans pair by pair.

Order (cheapest and most certain first): shared indices of one dataset → group overlap →
time order → exact duplicates across splits → duplicates inside test → conflicting labels →
near duplicates → preprocessing fitted before the split. It reports; it never edits a split.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .._catalogue import msg
from .._findings import Finding, Report
from . import _ids, _near, _preprocess
from ._scan import Options, Scan, Scanner
from ._sources import Source, make_source, make_spec, sample_input

MAX_EXAMPLES = 5
KINDS = {"table": "leakage.kind.table", "array": "leakage.kind.array", "samples": "leakage.kind.samples"}


def _finding(code: str, severity: str, key: str, evidence: dict[str, Any], **fields: Any) -> Finding:
    return Finding(category="data", code=f"data.{code}", severity=severity, stage="data",
                   message=msg(f"leakage.{key}.message", **fields), cause=msg(f"leakage.{key}.cause", **fields),
                   next_check=msg(f"leakage.{key}.next", **fields), evidence=evidence)


def _id_finding(column: str) -> Finding:
    return _finding("id_column", "info", "id", {"column": column}, column=column)


def _pct(count: int, n: int) -> str:
    return f"{100.0 * count / max(n, 1):.1f}%"


def _pairs(scans: list[Scan]) -> list[tuple[Scan, Scan]]:
    """(earlier, later) split pairs: train/test, train/val, val/test."""
    by = {s.source.name: s for s in scans}
    out = [(by["train"], by["test"])]
    if "val" in by:
        out += [(by["train"], by["val"]), (by["val"], by["test"])]
    return out


def check_splits(
    train: Any,
    test: Any,
    *,
    val: Any = None,
    groups: Any = None,
    time: Any = None,
    labels: Any = None,
    preprocessors: Iterable[Any] | None = None,
    ignore: Sequence[str] = (),
    content: Sequence[str] = (),
    files: str | None = None,
    near: bool = True,
    near_threshold: float = 0.9,
    chunk_size: int = 65536,
    progress: bool | None = None,
) -> Report:
    """Check train/val/test splits for leakage; returns a `Report` (category "data").

    Arguments:
        train, test, val: a torch Dataset / Subset / DataLoader, numpy array, tensor, pandas
            DataFrame, list of samples, or a path to a CSV / JSONL / Parquet file. All splits
            must be of one kind. A dataset sample that is a tuple is (input, label, ...).
        groups, time, labels: a column name (tables; dict samples), a callable on one sample
            or row, or one sequence per split (a tuple in the order train, test[, val], or a
            dict by split name).
        preprocessors: fitted normalizers (scikit-learn scalers, ``Normalize(mean, std)``,
            objects with ``mean_``/``std_``, or ``(mean, std)``) and vocabularies (dict, set,
            or an object with ``vocabulary_`` / ``get_vocab()``) to test for fit-before-split.
        ignore: table columns that are not content (row ids) and must not be compared.
        content: table columns to compare as content even when they look like row ids (a
            column unique within each split and disjoint across splits, integers or short
            strings without spaces, is otherwise treated as an id and reported as info
            ``data.id_column``).
        files: a table column of file paths, hashed by the files' bytes instead of their names.
        near, near_threshold: look for near duplicates with a similarity at least this
            (texts: shingle Jaccard; numbers: share of equal SimHash bits, 1 - angle/pi).
        chunk_size: rows per chunk; memory holds digests (about 8-40 bytes a row), not rows.
        progress: periodic progress lines on stderr (None: only for scans longer than 2 s).

    Returns:
        A `Report` whose findings have category "data" and stage "data"; empty when clean.

    Example:
        >>> r = torchtriage.check_splits(["a", "b"], ["a", "c"], groups=(["writer-a", "writer-b"],
        ...                              ["writer-a", "writer-c"]))
        >>> r.filter(code="data.group_overlap")[0].evidence["groups"]
        ['writer-a']
    """
    __tracebackhide__ = True
    if not 0.0 < float(near_threshold) <= 1.0:
        raise ValueError(msg("leakage.bad_threshold", given=near_threshold))
    if int(chunk_size) < 1:
        raise ValueError(msg("leakage.bad_chunk", given=chunk_size))
    sources = [make_source(train, "train")]
    if val is not None:
        sources.append(make_source(val, "val"))
    sources.append(make_source(test, "test"))
    kinds = {s.kind for s in sources}
    if len(kinds) > 1:
        given = "; ".join(f"{s.name} is {s.what} ({msg(KINDS[s.kind])})" for s in sources)
        raise TypeError(msg("leakage.mixed_kinds", given=given))
    preps = list(preprocessors or [])
    vocabs = [(p, v) for p in preps if (v := _preprocess.vocabulary(p)) is not None]
    norms = [(p, st) for p in preps if (st := _preprocess.normalizer_stats(p)) is not None]
    unknown = [p for p in preps if all(p is not q for q, _ in vocabs + norms)]
    if unknown:
        raise TypeError(msg("leakage.bad_preprocessor", given=type(unknown[0]).__qualname__))
    if files is not None and sources[0].kind != "table":
        raise TypeError(msg("leakage.files_not_table", given=sources[0].what))
    if files is not None and files not in sources[0].columns:
        raise ValueError(msg("leakage.missing_column", role="files", column=files, name="train",
                             columns=", ".join(sources[0].columns[:20])))
    specs = {role: make_spec(role, value, sources) for role, value in (("groups", groups), ("time", time),
                                                                       ("labels", labels))}
    roles = {sp.column for sp in specs.values() if sp is not None and sp.column}
    ids = _ids.id_columns(sources, roles | set(ignore) | set(content) | {files}, int(chunk_size))
    opts = Options(groups=specs["groups"], time=specs["time"],
                   labels=specs["labels"], ignore=set(ignore) | set(ids), files=files,
                   near=bool(near), tokens=bool(vocabs), stats=bool(norms), chunk=int(chunk_size), progress=progress)
    findings: list[Finding] = [_id_finding(c) for c in ids]
    findings += _index_overlap(sources)
    scanner = Scanner(opts)
    order = sorted(sources, key=lambda s: {"train": 0, "val": 1, "test": 2}[s.name])
    scans = [scanner.scan(s) for s in order]
    empty = [s.source for s in scans if not s.n]
    if empty:  # "no finding" on an empty split would read as a clean split
        raise ValueError(msg("leakage.empty_split", name=empty[0].name, given=empty[0].what))
    pairs = _pairs(scans)
    for a, b in pairs:
        findings += _group_overlap(a, b, groups)
    if opts.time is not None:
        for a, b in pairs:
            findings += _time_order(a, b)
    for a, b in pairs:
        findings += _exact(a, b)
    findings += _inside(next(s for s in scans if s.source.name == "test"))
    findings += _conflicts(scans)
    if near:
        for a, b in pairs:
            findings += _near_dups(a, b, float(near_threshold))
    for obj, stats in norms:
        f = _preprocess.check_normalizer(obj, stats, scans, "train")
        if f is not None:
            findings.append(f)
    for obj, vocab in vocabs:
        findings += _preprocess.check_vocabulary(obj, vocab, scans, "train")
    from .._frames import user_frame_from_stack

    uf = user_frame_from_stack(1)
    if uf is not None:
        findings = [f.replace(file=uf.file, line=uf.line, evidence=dict(f.evidence, source_line=uf.source))
                    for f in findings]
    findings = [f.replace(order=i) for i, f in enumerate(findings)]
    meta = {"check": "splits", "splits": {s.source.name: {"rows": s.n, "source": s.source.what} for s in scans},
            "near_threshold": float(near_threshold)}
    return Report(tuple(findings), meta=meta)


def _same_dataset(a: Source, b: Source) -> bool:
    """Two splits that index one dataset (Subsets, random_split, samplers of one DataLoader)."""
    return (a.kind == "samples" and a.root is not None and a.root is b.root
            and type(a.root).__name__ != "_ListDataset" and a.indices is not None and b.indices is not None)


def _index_overlap(sources: list[Source]) -> list[Finding]:
    out = []
    for i, a in enumerate(sources):
        for b in sources[i + 1:]:
            if not _same_dataset(a, b):
                continue
            shared = np.intersect1d(a.indices, b.indices)
            if len(shared):
                first, second = sorted((a, b), key=lambda s: {"train": 0, "val": 1, "test": 2}[s.name])
                out.append(_finding("subset_index_overlap", "error", "index", {
                    "pair": f"{first.name}/{second.name}", "shared_indices": int(len(shared)),
                    f"{first.name}_size": len(first.indices), f"{second.name}_size": len(second.indices),
                    "examples": [int(x) for x in shared[:MAX_EXAMPLES]]},
                    a=first.name, b=second.name, count=len(shared), dataset=type(a.root).__name__))
    return out


def _group_overlap(a: Scan, b: Scan, spec: Any) -> list[Finding]:
    if not a.groups or not b.groups:
        return []
    common = sorted(set(a.groups) & set(b.groups))
    if not common:
        return []
    an, bn = a.source.name, b.source.name
    column = spec if isinstance(spec, str) else "groups"
    return [_finding("group_overlap", "error", "group", {
        "pair": f"{an}/{bn}", "groups": common[:20], "overlapping_groups": len(common),
        f"groups_in_{an}": len(a.groups), f"groups_in_{bn}": len(b.groups),
        f"rows_in_{an}": int(sum(a.groups[g] for g in common)), f"rows_in_{bn}": int(sum(b.groups[g] for g in common))},
        a=an, b=bn, count=len(common), column=column, examples=", ".join(map(repr, common[:3])))]


def _when(x: float, dates: bool) -> Any:
    if dates:
        return _dt.datetime.fromtimestamp(x, _dt.timezone.utc).isoformat().replace("+00:00", "Z")
    return float(x)


def _time_order(a: Scan, b: Scan) -> list[Finding]:
    if a.times is None or b.times is None or not len(a.times) or not len(b.times):
        return []
    end = np.nanmax(a.times)
    early = np.nonzero(b.times < end)[0]
    if not len(early):
        return []
    dates = bool(getattr(a, "times_are_dates", False))
    first = early[np.argsort(b.times[early], kind="stable")[:MAX_EXAMPLES]]
    an, bn = a.source.name, b.source.name
    return [_finding("time_overlap", "error", "time", {
        "pair": f"{an}/{bn}", f"{an}_end": _when(end, dates), f"{bn}_start": _when(np.nanmin(b.times), dates),
        "earlier_rows": int(len(early)), "share": _pct(len(early), b.n),
        "examples": [{"row": int(i), "time": _when(b.times[i], dates)} for i in first]},
        a=an, b=bn, count=len(early), n=b.n, share=_pct(len(early), b.n))]


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


def _exact(a: Scan, b: Scan) -> list[Finding]:
    if not a.n or not b.n:
        return []
    order = np.argsort(a.exact, kind="stable")
    sa = a.exact[order]
    pos = np.searchsorted(sa, b.exact)
    hit = (pos < len(sa)) & (sa[np.minimum(pos, len(sa) - 1)] == b.exact)
    rows = np.nonzero(hit)[0]
    if len(rows) and _same_dataset(a.source, b.source):
        # Rows that are the very same index of one dataset: subset_index_overlap said so already.
        rows = rows[~np.isin(b.source.indices[rows], a.source.indices)]
    if not len(rows):
        return []
    an, bn = a.source.name, b.source.name
    ex = []
    for j in rows[:MAX_EXAMPLES]:
        e: dict[str, Any] = {an: int(order[pos[j]]), bn: int(j)}
        p = _preview(b.source, j)
        if p is not None:
            e["input"] = p
        ex.append(e)
    return [_finding("exact_duplicate", "warning", "exact", {
        "pair": f"{an}/{bn}", "duplicated_rows": int(len(rows)), f"rows_in_{bn}": b.n,
        "share": _pct(len(rows), b.n), "examples": ex},
        a=an, b=bn, count=len(rows), n=b.n, share=_pct(len(rows), b.n))]


def _inside(t: Scan) -> list[Finding]:
    if t.n < 2:
        return []
    vals, first, inv, counts = np.unique(t.exact, return_index=True, return_inverse=True, return_counts=True)
    repeats = t.n - len(vals)
    if not repeats:
        return []
    dup_vals = np.nonzero(counts > 1)[0]
    ex = []
    for k in dup_vals[np.argsort(first[dup_vals])][:MAX_EXAMPLES]:
        ex.append([int(i) for i in np.nonzero(inv == k)[0][:4]])
    name = t.source.name
    return [_finding("test_duplicate", "warning", "inside", {
        "split": name, "repeated_rows": int(repeats), "inputs_repeated": int(len(dup_vals)), "rows": t.n,
        "examples": ex}, split=name, count=int(repeats), distinct=int(len(dup_vals)))]


def _conflicts(scans: list[Scan]) -> list[Finding]:
    if any(s.labels is None for s in scans) or not sum(s.n for s in scans):
        return []
    ex = np.concatenate([s.exact for s in scans])
    lab = np.concatenate([s.labels for s in scans])  # type: ignore[misc]
    owner = np.concatenate([np.full(s.n, k) for k, s in enumerate(scans)])
    row = np.concatenate([np.arange(s.n) for s in scans])
    order = np.lexsort((lab, ex))
    e, lb = ex[order], lab[order]
    start = np.r_[True, e[1:] != e[:-1]]
    run = np.cumsum(start) - 1
    first_label = lb[start][run]
    bad_runs = np.unique(run[lb != first_label])
    if not len(bad_runs):
        return []
    run_starts = np.nonzero(start)[0]
    run_ends = np.r_[run_starts[1:], len(e)]
    shown = {}
    for s in scans:
        shown.update(s.label_shown)
    examples = []
    for r in bad_runs[:MAX_EXAMPLES]:
        idx = order[run_starts[r]:run_ends[r]]
        idx = idx[np.lexsort((row[idx], owner[idx]))][:6]  # split order, then row
        examples.append([{"row": f"{scans[owner[i]].source.name}[{row[i]}]", "label": shown.get(int(lab[i]), "?")}
                         for i in idx])
    return [_finding("conflicting_labels", "warning", "conflict", {
        "inputs_with_conflicting_labels": int(len(bad_runs)), "examples": examples}, count=int(len(bad_runs)))]


def _near_dups(a: Scan, b: Scan, threshold: float) -> list[Finding]:
    if a.near_sig is None or b.near_sig is None or a.near_kind != b.near_kind or a.near_kind is None:
        return []
    kind = a.near_kind
    va, vb = np.nonzero(a.near_valid)[0], np.nonzero(b.near_valid)[0]
    if not len(va) or not len(vb):
        return []
    bands = _near.text_bands if kind == "text" else _near.sim_bands
    ia, ib = _near.pairs_by_bands(bands(a.near_sig[va]), bands(b.near_sig[vb]))
    ia, ib = va[ia], vb[ib]
    sim = _near.similarity(kind, a.near_sig[ia], b.near_sig[ib])
    keep = (sim >= threshold) & (a.exact[ia] != b.exact[ib])
    ia, ib, sim = ia[keep], ib[keep], sim[keep]
    if not len(ib):
        return []
    rows = np.unique(ib)
    top = np.argsort(-sim, kind="stable")
    ex, seen = [], set()
    an, bn = a.source.name, b.source.name
    for k in top:
        if int(ib[k]) in seen:
            continue
        seen.add(int(ib[k]))
        e: dict[str, Any] = {an: int(ia[k]), bn: int(ib[k]), "similarity": round(float(sim[k]), 3)}
        for side, src, i in ((an, a.source, ia[k]), (bn, b.source, ib[k])):
            p = _preview(src, i) if kind == "text" else None
            if p is not None:
                e[f"{side}_input"] = p
        ex.append(e)
        if len(ex) >= MAX_EXAMPLES:
            break
    what = msg("leakage.near.kind_text" if kind == "text" else "leakage.near.kind_num")
    return [_finding("near_duplicate", "warning", "near", {
        "pair": f"{an}/{bn}", "rows_with_near_duplicate": int(len(rows)), f"rows_in_{bn}": b.n,
        "share": _pct(len(rows), b.n), "threshold": threshold, "measure": what, "examples": ex},
        a=an, b=bn, count=int(len(rows)), n=b.n, threshold=threshold, what=what)]


def check_preprocessing(fitted: Any, train: Any, test: Any, *, val: Any = None, **options: Any) -> Report:
    """Check fitted preprocessing for statistics learned from more than train.

    Arguments:
        fitted: one preprocessor or a list of them: scikit-learn scalers (``mean_``,
            ``scale_``, ``var_``, ``data_min_``/``data_max_``), ``Normalize(mean, std)``
            objects, ``(mean, std)`` constants, user objects with ``mean_``/``std_``, or
            vocabularies (dict, set, ``vocabulary_``, ``get_vocab()``).
        train, test, val: the splits, as for `check_splits`.
        options: other `check_splits` keywords (``ignore``, ``chunk_size``, ...).

    Returns:
        A `Report` with only the preprocessing findings.

    Example:
        >>> scaler = StandardScaler().fit(np.concatenate([x_train, x_test]))
        >>> torchtriage.check_preprocessing(scaler, x_train, x_test).primary.code
        'data.preprocessing_fit_on_all'
    """
    __tracebackhide__ = True
    preps = fitted if isinstance(fitted, list) else [fitted]
    report = check_splits(train, test, val=val, preprocessors=preps, near=False, **options)
    keep = [f for f in report.findings if f.code in ("data.preprocessing_fit_on_all", "data.vocabulary_from_test")]
    return Report(tuple(keep), meta=report.meta)
