"""Tables in chunks: CSV and JSONL with the standard library, Parquet and DataFrames via
pandas/pyarrow (optional, imported here at the point of use).

A chunk is ``{column: numpy array (numbers) | list (anything else)}``; numbers become float64
so that a CSV "3", a JSONL 3 and a Parquet int64 3 agree (see `_hashing`).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._catalogue import msg

FORMATS = {".csv": "csv", ".tsv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
Chunk = dict[str, Any]


def need(module: str) -> Any:
    """Import an optional dependency, or fail with the install hint."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(msg("leakage.need_extra", module=module)) from None


def file_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise ValueError(msg("leakage.bad_format", path=path, ext=ext or "(none)",
                             accepted=", ".join(sorted(FORMATS))))
    return FORMATS[ext]


def file_columns(path: str) -> list[str]:
    """The column names of a table file (its header, first record, or schema)."""
    fmt = file_format(path)
    try:
        if fmt == "csv":
            with open(path, newline="", encoding="utf-8") as fh:
                header = next(csv.reader(fh, delimiter="\t" if path.lower().endswith(".tsv") else ","), None)
            return list(header or [])
        if fmt == "jsonl":
            cols: dict[str, None] = {}
            with open(path, encoding="utf-8") as fh:
                for i, line in enumerate(fh):
                    if line.strip():
                        cols.update(dict.fromkeys(_record(line, path, i)))
                    if i >= 100:
                        break
            return list(cols)
        pq = need("pyarrow.parquet")
        try:
            return list(pq.ParquetFile(path).schema_arrow.names)
        except ValueError as e:  # pyarrow's ArrowInvalid: not a Parquet file, or a damaged one
            raise ValueError(msg("leakage.unreadable", path=path, error=str(e))) from None
    except OSError as e:
        raise ValueError(msg("leakage.unreadable", path=path, error=e.strerror or str(e))) from None
    except UnicodeDecodeError as e:
        raise ValueError(msg("leakage.unreadable", path=path, error=str(e))) from None


def is_shards(spec: str) -> bool:
    """A folder of table files, or a glob pattern (``data/train-*.parquet``)."""
    return os.path.isdir(spec) or any(ch in spec for ch in "*?[")


def shard_paths(spec: str) -> list[str]:
    """The table files of a folder or glob, sorted; a ValueError when there are none."""
    import glob

    if os.path.isdir(spec):
        paths = sorted(os.path.join(spec, f) for f in os.listdir(spec)
                       if os.path.splitext(f)[1].lower() in FORMATS and not f.startswith("."))
    else:
        paths = sorted(p for p in glob.glob(spec) if os.path.isfile(p))
    if not paths:
        raise ValueError(msg("leakage.no_shards", spec=spec, accepted=", ".join(sorted(FORMATS))))
    for p in paths:
        file_format(p)
    return paths


def shard_columns(paths: list[str]) -> list[str]:
    """The shards' common columns; shards with other columns are one clear error."""
    first = file_columns(paths[0])
    for p in paths[1:]:
        cols = file_columns(p)
        if sorted(cols) != sorted(first):
            extra = sorted(set(cols) - set(first))
            missing = sorted(set(first) - set(cols))
            raise ValueError(msg("leakage.mixed_schema", path=p, first=paths[0],
                                 extra=", ".join(extra) or "-", missing=", ".join(missing) or "-"))
    return first


def iter_files(paths: list[str], size: int) -> Iterator[Chunk]:
    for p in paths:
        yield from iter_file(p, size)


def _record(line: str, path: str, i: int) -> dict[str, Any]:
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(msg("leakage.unreadable", path=path, error=f"line {i + 1}: {e.msg}")) from None
    if not isinstance(rec, dict):
        raise ValueError(msg("leakage.unreadable", path=path,
                             error=f"line {i + 1}: a JSON {type(rec).__name__}, expected an object per line"))
    return rec


def _columnar(rows: list[dict[str, Any]], columns: list[str]) -> Chunk:
    out: Chunk = {}
    for c in columns:
        cells = [r.get(c) for r in rows]
        out[c] = _numeric_or_list(cells)
    return out


def _numeric_or_list(cells: list[Any]) -> Any:
    if cells and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in cells):
        return np.asarray(cells, dtype=np.float64)
    return cells


def iter_file(path: str, size: int) -> Iterator[Chunk]:
    """Chunks of `size` rows of a CSV, JSONL or Parquet file."""
    fmt = file_format(path)
    try:
        if fmt == "csv":
            yield from _iter_csv(path, size)
        elif fmt == "jsonl":
            yield from _iter_jsonl(path, size)
        else:
            pq = need("pyarrow.parquet")
            try:
                batches = pq.ParquetFile(path).iter_batches(batch_size=size)
            except ValueError as e:  # pyarrow's ArrowInvalid
                raise ValueError(msg("leakage.unreadable", path=path, error=str(e))) from None
            for batch in batches:
                yield {name: _arrow_column(batch.column(i)) for i, name in enumerate(batch.schema.names)}
    except OSError as e:
        raise ValueError(msg("leakage.unreadable", path=path, error=e.strerror or str(e))) from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise ValueError(msg("leakage.unreadable", path=path, error=str(e))) from None


def _iter_csv(path: str, size: int) -> Iterator[Chunk]:
    delim = "\t" if path.lower().endswith(".tsv") else ","
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh, delimiter=delim)
        header = next(reader, None) or []
        rows: list[list[str]] = []
        for row in reader:
            rows.append(row)
            if len(rows) >= size:
                yield _csv_chunk(header, rows)
                rows = []
        if rows:
            yield _csv_chunk(header, rows)


def _csv_chunk(header: list[str], rows: list[list[str]]) -> Chunk:
    # Cells stay strings here; `_hashing.object_words` reads numeric text as numbers.
    cols = list(zip(*[r + [""] * (len(header) - len(r)) for r in rows])) if rows else [()] * len(header)
    return {name: list(col) for name, col in zip(header, cols)}


def _iter_jsonl(path: str, size: int) -> Iterator[Chunk]:
    with open(path, encoding="utf-8") as fh:
        rows: list[dict[str, Any]] = []
        columns: dict[str, None] = {}
        for i, line in enumerate(fh):
            if not line.strip():
                continue
            rec = _record(line, path, i)
            columns.update(dict.fromkeys(rec))
            rows.append(rec)
            if len(rows) >= size:
                yield _columnar(rows, list(columns))
                rows = []
        if rows:
            yield _columnar(rows, list(columns))


def _arrow_column(col: Any) -> Any:
    import pyarrow as pa

    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
    return col.to_pylist()


def iter_frame(df: Any, size: int) -> Iterator[Chunk]:
    """Chunks of a pandas DataFrame; numeric and datetime columns as float64 arrays."""
    for start in range(0, len(df), size):
        part = df.iloc[start:start + size]
        chunk: Chunk = {}
        for name in part.columns:
            s = part[name]
            kind = s.dtype.kind
            if kind in "biuf":
                chunk[str(name)] = s.to_numpy(dtype=np.float64, na_value=np.nan)
            else:
                chunk[str(name)] = s.tolist()
        yield chunk
