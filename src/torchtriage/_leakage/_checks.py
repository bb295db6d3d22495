"""`check_splits`: scan every split once, then compare the scans pair by pair.

Order (cheapest and most certain first): shared indices of one dataset → group overlap →
time order → exact duplicates across splits → duplicates inside test → conflicting labels →
near duplicates → preprocessing fitted before the split. It reports; it never edits a split.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .._catalogue import msg
from .._findings import Finding, Report
from ._compare import MAX_EXAMPLES, _same_dataset, compare, finding
from ._engines import scan_all
from ._ids import id_columns
from ._preprocess import check_normalizer, check_vocabulary, normalizer_stats, vocabulary
from ._scan import Options
from ._sources import Source, make_source, make_spec

KINDS = {"table": "leakage.kind.table", "array": "leakage.kind.array", "samples": "leakage.kind.samples"}
_RANK = {"train": 0, "val": 1, "test": 2}


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
    near_threshold: float | None = None,
    chunk_size: int = 65536,
    progress: bool | None = None,
    engine: str = "auto",
    memory_limit: str | None = None,
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
            (texts: shingle Jaccard, default 0.9; numbers: share of equal SimHash bits,
            1 - angle/pi, default 0.98).
        chunk_size: rows per chunk; memory holds digests (about 8-40 bytes a row), not rows.
        progress: periodic progress lines on stderr (None: only for scans longer than 2 s).
        engine: where the comparisons run: "memory" (numpy in this process), "duckdb"
            (an embedded database that spills to disk: inputs larger than memory), "dask"
            (a Dask cluster: the client of ``dask.distributed`` in use, else a local one), or
            "auto" (duckdb for table files above `_engines.AUTO_BYTES` when it is installed).
            Every engine gives the same findings.
        memory_limit: the duckdb engine's memory cap (DuckDB syntax, e.g. "2GB"; default: a
            quarter of this machine's memory).

    Returns:
        A `Report` whose findings have category "data" and stage "data"; empty when clean.

    Example:
        >>> r = torchtriage.check_splits(["a", "b"], ["a", "c"], groups=(["writer-a", "writer-b"],
        ...                              ["writer-a", "writer-c"]))
        >>> r.filter(code="data.group_overlap")[0].evidence["groups"]
        ['writer-a']
    """
    __tracebackhide__ = True
    if near_threshold is not None and not 0.0 < float(near_threshold) <= 1.0:
        raise ValueError(msg("leakage.bad_threshold", given=near_threshold))
    if int(chunk_size) < 1:
        raise ValueError(msg("leakage.bad_chunk", given=chunk_size))
    sources = _sources(train, val, test)
    vocabs, norms = _preprocessors(preprocessors)
    _check_files(files, sources[0])
    specs = {role: make_spec(role, value, sources) for role, value in (("groups", groups), ("time", time),
                                                                       ("labels", labels))}
    roles = {sp.column for sp in specs.values() if sp is not None and sp.column}
    ids = id_columns(sources, roles | set(ignore) | set(content) | ({files} if files else set()), int(chunk_size))
    opts = Options(groups=specs["groups"], time=specs["time"],
                   labels=specs["labels"], ignore=set(ignore) | set(ids), files=files,
                   near=bool(near), tokens=bool(vocabs), stats=bool(norms), chunk=int(chunk_size), progress=progress)
    findings: list[Finding] = [finding("id_column", "info", "id", {"column": c}, column=c) for c in ids]
    findings += _index_overlap(sources)
    order = sorted(sources, key=lambda s: _RANK[s.name])
    store, scans = scan_all(engine, order, opts, memory_limit=memory_limit)
    try:
        empty = [s.source for s in scans if not s.n]
        if empty:  # "no finding" on an empty split would read as a clean split
            raise ValueError(msg("leakage.empty_split", name=empty[0].name, given=empty[0].what))
        given = None if near_threshold is None else float(near_threshold)  # None: each kind's default
        findings += compare(store, scans, groups, near=near, threshold=given, timed=opts.time is not None)
    finally:
        store.close()
    findings += _fitted_before_split(norms, vocabs, scans)
    from .._frames import user_frame_from_stack

    uf = user_frame_from_stack(1)
    if uf is not None:
        findings = [f.replace(file=uf.file, line=uf.line, evidence=dict(f.evidence, source_line=uf.source))
                    for f in findings]
    findings = [f.replace(order=i) for i, f in enumerate(findings)]
    meta = {"check": "splits", "splits": {s.source.name: {"rows": s.n, "source": s.source.what} for s in scans},
            "near_threshold": None if near_threshold is None else float(near_threshold), "engine": store.engine}
    return Report(tuple(findings), meta=meta)


def _sources(train: Any, val: Any, test: Any) -> list[Source]:
    """The splits in the order train[, val], test; all of one kind (else a TypeError)."""
    sources = [make_source(train, "train")]
    if val is not None:
        sources.append(make_source(val, "val"))
    sources.append(make_source(test, "test"))
    kinds = {s.kind for s in sources}
    if len(kinds) > 1:
        given = "; ".join(f"{s.name} is {s.what} ({msg(KINDS[s.kind])})" for s in sources)
        raise TypeError(msg("leakage.mixed_kinds", given=given))
    return sources


def _preprocessors(preprocessors: Iterable[Any] | None) -> tuple[list[tuple[Any, Any]], list[tuple[Any, Any]]]:
    """(vocabularies, normalizers) among the fitted preprocessors; anything else is a TypeError."""
    preps = list(preprocessors or [])
    vocabs = [(p, v) for p in preps if (v := vocabulary(p)) is not None]
    norms = [(p, st) for p in preps if (st := normalizer_stats(p)) is not None]
    unknown = [p for p in preps if all(p is not q for q, _ in vocabs + norms)]
    if unknown:
        raise TypeError(msg("leakage.bad_preprocessor", given=type(unknown[0]).__qualname__))
    return vocabs, norms


def _check_files(files: str | None, train: Source) -> None:
    """`files` names a column of the train table."""
    if files is not None and train.kind != "table":
        raise TypeError(msg("leakage.files_not_table", given=train.what))
    if files is not None and files not in train.columns:
        raise ValueError(msg("leakage.missing_column", role="files", column=files, name="train",
                             columns=", ".join(train.columns[:20])))


def _fitted_before_split(norms: list[tuple[Any, Any]], vocabs: list[tuple[Any, Any]], scans: Any) -> list[Finding]:
    """Normalizers and vocabularies that saw more than the training split."""
    out: list[Finding] = []
    for obj, stats in norms:
        f = check_normalizer(obj, stats, scans, "train")
        if f is not None:
            out.append(f)
    for obj, vocab in vocabs:
        out += check_vocabulary(obj, vocab, scans, "train")
    return out


def _index_overlap(sources: list[Source]) -> list[Finding]:
    out = []
    for i, a in enumerate(sources):
        for b in sources[i + 1:]:
            if not _same_dataset(a, b):
                continue
            assert a.indices is not None and b.indices is not None  # _same_dataset checked
            shared = np.intersect1d(a.indices, b.indices)
            if len(shared):
                first, second = sorted((a, b), key=lambda s: _RANK[s.name])
                assert first.indices is not None and second.indices is not None  # as a's and b's
                out.append(finding("subset_index_overlap", "error", "index", {
                    "pair": f"{first.name}/{second.name}", "shared_indices": int(len(shared)),
                    f"{first.name}_size": len(first.indices), f"{second.name}_size": len(second.indices),
                    "examples": [int(x) for x in shared[:MAX_EXAMPLES]]},
                    a=first.name, b=second.name, count=len(shared), dataset=type(a.root).__name__))
    return out


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
