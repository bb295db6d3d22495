"""`--suggest-split OUT`: a group-aware split written to a NEW file; the inputs stay as they are.

Two streaming passes over the input files: (1) rows per group and per split; (2) every row
written to OUT with a ``split`` column. Groups are visited in a fixed pseudo-random order
(blake2b of the group key) and filled into train, then val, then test, in the proportions of
the original splits, so no group lands in two splits.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._catalogue import msg
from ._hashing import key_of
from ._tables import iter_file, need

OUT_FORMATS = (".csv", ".jsonl", ".parquet")


def _cell(v: Any) -> Any:
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return int(f) if f.is_integer() else (None if f != f else f)
    if isinstance(v, np.integer):
        return int(v)
    return v


def suggest_split(paths: dict[str, str], group: str, out: str, chunk: int = 65536) -> tuple[int, int]:
    """Write every row of `paths` (split name → file) to `out` with a group-aware ``split``.

    Returns (rows, groups). Raises ValueError when `out` exists or has an unsupported suffix.
    """
    ext = os.path.splitext(out)[1].lower()
    if ext not in OUT_FORMATS:
        raise ValueError(msg("leakage.bad_format", path=out, ext=ext or "(none)", accepted=", ".join(OUT_FORMATS)))
    if os.path.exists(out):
        raise ValueError(msg("leakage.cli.suggest_exists", path=out))
    sizes: Counter = Counter()
    rows_of: Counter = Counter()
    columns: dict[str, None] = {}
    for name, path in paths.items():
        for cols in iter_file(path, chunk):
            if group not in cols:
                raise ValueError(msg("leakage.missing_column", role="--group", column=group, name=name,
                                     columns=", ".join(list(cols)[:20])))
            columns.update(dict.fromkeys(cols))
            keys = [key_of(_cell(g)) for g in cols[group]]
            rows_of.update(keys)
            sizes[name] += len(keys)
    order = ["train", "val", "test"]
    names = [n for n in order if n in paths]
    total = sum(sizes.values())
    targets = np.cumsum([sizes[n] for n in names]) if total else np.zeros(len(names))
    assign: dict[str, str] = {}
    filled, k = 0, 0
    for g in sorted(rows_of, key=lambda g: hashlib.blake2b(g.encode(), digest_size=8).digest()):
        while k < len(names) - 1 and filled >= targets[k]:
            k += 1
        assign[g] = names[k]
        filled += rows_of[g]
    header = [*columns, "split"] if "split" not in columns else [*columns, "suggested_split"]
    split_col = header[-1]
    tmp = out + ".partial"
    try:
        _write(paths, group, assign, header, split_col, tmp, ext, chunk)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return total, len(rows_of)


def _records(paths: dict[str, str], group: str, assign: dict[str, str], header: list[str], split_col: str,
             chunk: int) -> Iterator[dict[str, Any]]:
    for path in paths.values():
        for cols in iter_file(path, chunk):
            n = len(cols[group])
            for i in range(n):
                rec = {c: (_cell(cols[c][i]) if c in cols else None) for c in header[:-1]}
                rec[split_col] = assign[key_of(_cell(cols[group][i]))]
                yield rec


def _write(paths: dict[str, str], group: str, assign: dict[str, str], header: list[str], split_col: str,
           out: str, ext: str, chunk: int) -> None:
    recs = _records(paths, group, assign, header, split_col, chunk)
    if ext == ".csv":
        with open(out, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=header)
            w.writeheader()
            for r in recs:
                w.writerow(r)
    elif ext == ".jsonl":
        with open(out, "w", encoding="utf-8") as fh:
            for r in recs:
                fh.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")
    else:
        pa = need("pyarrow")
        pq = need("pyarrow.parquet")
        # Parquet needs one schema: gathered in memory (documented limit of --suggest-split).
        table = pa.Table.from_pylist(list(recs))
        pq.write_table(table, out)
