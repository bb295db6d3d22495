"""The out-of-core engine: the scanned parts in an embedded DuckDB database on disk (issue 17).

Why DuckDB: one wheel with no dependencies, an on-disk database whose joins, aggregates and
window functions spill to a temporary folder under a hard `memory_limit`, and Arrow in and out
without copies. The rows are read and hashed by the same code as in process (`_scan`), so the
digests are the same; DuckDB does the grouping and the joins that the in-process engine does
with numpy sorts, which is where memory grows with the number of rows.

Per split, one table ``t_<split>(row, exact, label, grp, t, sig)`` and, for near duplicates,
``b_<split>(row, band, key)`` (the LSH band keys). Candidate pairs come from an engine join on
the band keys (at most `BAND_CAP` earlier rows per key, the smallest row numbers, as in
process); their signatures come back in batches and are compared by `_near.similarity`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import numpy as np

from .._catalogue import msg
from . import _near
from ._scan import Part
from ._store import (
    BAND_CAP,
    MAX_EXAMPLES,
    MAX_GROUPS,
    Conflicts,
    GroupOverlap,
    Matches,
    Near,
    Repeats,
    Store,
    TimeOrder,
    choose_examples,
)

_PAIR_BATCH = 1 << 18


def need_engine(engine: str, module: str) -> Any:
    """Import an engine's optional dependency, or fail with the install hint."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(msg("leakage.need_scale", engine=engine, module=module, extra="scale")) from None


def _memory_default() -> str:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: DuckDB's own default
        return ""
    return f"{max(total // 4, 256 << 20) >> 20}MB"


def _fixed(arr: np.ndarray) -> Any:
    """(n, k) array → an Arrow fixed-size binary column of its rows' bytes (no Python objects)."""
    import pyarrow as pa

    raw = np.ascontiguousarray(arr)
    width = raw.dtype.itemsize * (raw.shape[1] if raw.ndim > 1 else 1)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(raw), [None, pa.py_buffer(raw.tobytes())])


def _rows_of(col: Any, dtype: Any, width: int) -> np.ndarray:
    """A binary Arrow column of equal-width values → (n, width) array of `dtype`."""
    import pyarrow as pa

    col = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    if pa.types.is_fixed_size_binary(col.type):
        data = np.frombuffer(col.buffers()[1], np.uint8)[col.offset * col.type.byte_width:]
        n = len(col)
        return data[: n * col.type.byte_width].view(dtype).reshape(n, width)
    offsets = np.frombuffer(col.buffers()[1], np.int32 if pa.types.is_binary(col.type) else np.int64)
    offsets = offsets[col.offset: col.offset + len(col) + 1]
    data = np.frombuffer(col.buffers()[2], np.uint8)[offsets[0]: offsets[-1]]
    return data.view(dtype).reshape(len(col), width)


class DuckStore(Store):
    engine = "duckdb"

    def __init__(self, *, memory_limit: str | None = None, threads: int | None = None) -> None:
        duckdb = need_engine("duckdb", "duckdb")
        need_engine("duckdb", "pyarrow")
        self._dir = tempfile.mkdtemp(prefix="torchtriage-splits-")
        self.con = duckdb.connect(os.path.join(self._dir, "splits.duckdb"))
        limit = memory_limit or _memory_default()
        try:
            if limit:
                self.con.execute(f"SET memory_limit = '{limit}'").fetchall()
        except duckdb.Error as e:
            self.close()
            raise ValueError(msg("leakage.bad_memory_limit", given=limit, error=str(e).splitlines()[0])) from None
        self._run(f"SET temp_directory = '{os.path.join(self._dir, 'spill')}'")
        self._run("SET preserve_insertion_order = false")
        if threads:
            self._run(f"SET threads = {int(threads)}")
        self._n: dict[str, int] = {}
        self._cols: dict[str, dict[str, bool]] = {}
        self._sig: dict[str, tuple[str | None, int]] = {}  # split -> (kind, rows with a signature)

    # --- loading ----------------------------------------------------------------------------
    def add(self, split: str, part: Part) -> None:
        import pyarrow as pa

        rows = np.arange(part.start, part.start + part.n, dtype=np.int64)
        cols: dict[str, Any] = {"row": rows, "exact": part.exact.astype(np.uint64, copy=False)}
        cols["label"] = part.labels if part.labels is not None else pa.nulls(part.n, pa.uint64())
        cols["grp"] = pa.array(part.groups, pa.string()) if part.groups is not None else pa.nulls(part.n, pa.string())
        cols["t"] = (pa.array(part.times, pa.float64(), from_pandas=True) if part.times is not None
                     else pa.nulls(part.n, pa.float64()))  # from_pandas: NaN → NULL, ignored by min/max
        kind = None
        if part.sig is not None:
            kind = "text" if part.sig.dtype == np.uint32 else "num"
            cols["sig"] = _fixed(part.sig)
            cols["valid"] = np.asarray(part.valid, bool)
        else:
            cols["sig"] = pa.nulls(part.n, pa.binary())
            cols["valid"] = np.zeros(part.n, bool)
        tbl = pa.table(cols)
        first = split not in self._n
        self.con.register("_part", tbl)
        try:
            if first:
                self._run(f"CREATE TABLE t_{split} AS SELECT row, exact, label, grp, t, "
                          f"CAST(sig AS BLOB) AS sig, valid FROM _part")
                self._cols[split] = {"labels": True, "groups": True, "times": True}
            else:
                self._run(f"INSERT INTO t_{split} SELECT row, exact, label, grp, t, "
                          f"CAST(sig AS BLOB), valid FROM _part")
            if kind is not None and part.sig is not None:  # (kind is set with sig)
                bands = (_near.text_bands if kind == "text" else _near.sim_bands)(part.sig)
                ok = np.asarray(part.valid, bool)
                nb = bands.shape[1]
                btbl = pa.table({"row": np.repeat(rows[ok], nb),
                                 "band": np.tile(np.arange(nb, dtype=np.int8), int(ok.sum())),
                                 "key": bands[ok].reshape(-1)})
                self.con.register("_bands", btbl)
                try:
                    if not self._has(f"b_{split}"):
                        self._run(f"CREATE TABLE b_{split} AS SELECT * FROM _bands")
                    else:
                        self._run(f"INSERT INTO b_{split} SELECT * FROM _bands")
                finally:
                    self.con.unregister("_bands")
        finally:
            self.con.unregister("_part")
        c = self._cols[split]
        c["labels"] &= part.labels is not None
        c["groups"] &= part.groups is not None
        c["times"] &= part.times is not None
        self._n[split] = self._n.get(split, 0) + part.n
        old_kind, old_rows = self._sig.get(split, (kind, 0))
        self._sig[split] = (kind if old_kind == kind else None, old_rows + (part.n if kind else 0))

    def _has(self, table: str) -> bool:
        return bool(self._one("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table])[0])

    def close(self) -> None:
        con = getattr(self, "con", None)
        if con is not None:
            try:
                con.close()
            finally:
                self.con = None
        shutil.rmtree(self._dir, ignore_errors=True)

    # --- answers ----------------------------------------------------------------------------
    def _run(self, sql: str) -> None:
        self._all(sql)

    def _one(self, sql: str, params: list[Any] | None = None) -> Any:
        rows = self._all(sql, params)
        return rows[0] if rows else None

    def _all(self, sql: str, params: list[Any] | None = None) -> list[Any]:
        import duckdb

        try:
            return self.con.execute(sql, params or []).fetchall()  # fetch to the end: frees the connection
        except duckdb.Error as e:  # out of memory or disk: one line naming the cap, not a traceback
            raise ValueError(msg("leakage.duckdb_failed", error=str(e).splitlines()[0])) from None

    def rows(self, split: str) -> int:
        return self._n.get(split, 0)

    def has_labels(self, split: str) -> bool:
        return self._n.get(split, 0) > 0 and self._cols[split]["labels"]

    def has_groups(self, split: str) -> bool:
        return self._n.get(split, 0) > 0 and self._cols[split]["groups"]

    def has_times(self, split: str) -> bool:
        return self._n.get(split, 0) > 0 and self._cols[split]["times"]

    def near_kind(self, split: str) -> str | None:
        kind, rows = self._sig.get(split, (None, 0))
        return kind if rows == self._n.get(split, 0) and rows else None

    def group_overlap(self, a: str, b: str) -> GroupOverlap | None:
        with_ = (f"WITH ga AS (SELECT grp, count(*) AS c FROM t_{a} GROUP BY grp), "
                 f"gb AS (SELECT grp, count(*) AS c FROM t_{b} GROUP BY grp) ")
        count, rows_a, rows_b = self._one(with_ + "SELECT count(*), coalesce(sum(ga.c), 0), coalesce(sum(gb.c), 0) "
                                          "FROM ga JOIN gb USING (grp)")
        if not count:
            return None
        common = [r[0] for r in self._all(with_ + f"SELECT grp FROM ga JOIN gb USING (grp) "
                                                  f"ORDER BY grp LIMIT {MAX_GROUPS}")]
        na = self._one(f"SELECT count(DISTINCT grp) FROM t_{a}")[0]
        nb = self._one(f"SELECT count(DISTINCT grp) FROM t_{b}")[0]
        return GroupOverlap(common, int(count), int(na), int(nb), int(rows_a), int(rows_b))

    def time_order(self, a: str, b: str) -> TimeOrder | None:
        end = self._one(f"SELECT max(t) FROM t_{a}")[0]
        if end is None:
            return None
        early, start = self._one(f"SELECT count(*) FILTER (WHERE t < ?), min(t) FROM t_{b}", [end])
        if not early:
            return None
        ex = self._all(f"SELECT row, t FROM t_{b} WHERE t < ? ORDER BY t, row LIMIT {MAX_EXAMPLES}", [end])
        return TimeOrder(float(end), float(start), int(early), [(int(r), float(t)) for r, t in ex])

    def exact(self, a: str, b: str, exclude_b: np.ndarray | None = None) -> Matches:
        import pyarrow as pa

        src = f"t_{b}"
        if exclude_b is not None:  # rows that are the same index of one dataset: said elsewhere
            self.con.register("_skip", pa.table({"row": np.nonzero(exclude_b)[0].astype(np.int64)}))
            src = f"(SELECT * FROM t_{b} ANTI JOIN _skip USING (row))"
        try:
            with_ = f"WITH fa AS (SELECT exact, min(row) AS r FROM t_{a} GROUP BY exact), tb AS (SELECT * FROM {src}) "
            count = self._one(with_ + "SELECT count(*) FROM tb JOIN fa USING (exact)")[0]
            ex = self._all(with_ + f"SELECT fa.r, tb.row FROM tb JOIN fa USING (exact) "
                           f"ORDER BY tb.row LIMIT {MAX_EXAMPLES}") if count else []
        finally:
            if exclude_b is not None:
                self.con.unregister("_skip")
        return Matches(int(count), [(int(i), int(j)) for i, j in ex])

    def repeats(self, split: str) -> Repeats:
        t = f"t_{split}"
        distinct, dup = self._one(f"SELECT count(*), count(*) FILTER (WHERE c > 1) FROM "
                                  f"(SELECT count(*) AS c FROM {t} GROUP BY exact)")
        ex = self._all(f"WITH d AS (SELECT exact, min(row) AS f FROM {t} GROUP BY exact HAVING count(*) > 1 "
                       f"ORDER BY f LIMIT {MAX_EXAMPLES}) "
                       f"SELECT d.f, list({t}.row ORDER BY {t}.row) FROM d JOIN {t} USING (exact) "
                       f"GROUP BY d.exact, d.f ORDER BY d.f") if dup else []
        return Repeats(self.rows(split) - int(distinct), int(dup), [[int(i) for i in rows[:4]] for _, rows in ex])

    def conflicts(self, splits: list[str]) -> Conflicts:
        union = " UNION ALL ".join(f"SELECT {k} AS k, row, exact, label FROM t_{s}" for k, s in enumerate(splits))
        with_ = (f"WITH u AS ({union}), "
                 # DISTINCT pairs, then a plain count: both are spilling group-bys (a DISTINCT
                 # aggregate keeps its own hash tables in memory).
                 "bad AS (SELECT exact FROM (SELECT DISTINCT exact, label FROM u) GROUP BY exact HAVING count(*) > 1) ")
        count = self._one(with_ + "SELECT count(*) FROM bad")[0]
        if not count:
            return Conflicts(0, [])
        rows = self._all(with_ + f", first AS (SELECT exact FROM bad ORDER BY exact LIMIT {MAX_EXAMPLES}) "
                         "SELECT u.exact, list({'k': u.k, 'r': u.row, 'l': u.label} ORDER BY u.k, u.row) "
                         "FROM u JOIN first USING (exact) GROUP BY u.exact ORDER BY u.exact")
        examples = [[(int(it["k"]), int(it["r"]), int(it["l"])) for it in items[:6]] for _, items in rows]
        return Conflicts(int(count), examples)

    def _pairs(self, sql: str) -> Any:
        yield from self.con.sql(sql).to_arrow_reader(_PAIR_BATCH)

    def near(self, a: str, b: str, threshold: float) -> Near:
        kind = self.near_kind(a)
        if not self._has(f"b_{a}") or not self._has(f"b_{b}"):
            return Near(0, [])
        # Only a's band keys that b has too enter the window (a semi join, built on b's keys):
        # the window then sorts candidates, not every row of a, and stays within the memory cap.
        sql = (f"WITH kb AS (SELECT DISTINCT band, key FROM b_{b}), "
               f"ma AS (SELECT ba.row, ba.band, ba.key FROM b_{a} AS ba SEMI JOIN kb USING (band, key)), "
               f"ca AS (SELECT row, band, key FROM (SELECT *, row_number() OVER "
               f"(PARTITION BY band, key ORDER BY row) AS rn FROM ma) WHERE rn <= {BAND_CAP}), "
               f"p AS (SELECT DISTINCT ca.row AS ia, bb.row AS ib FROM ca JOIN b_{b} AS bb USING (band, key)) "
               f"SELECT p.ia, p.ib, x.sig AS sa, y.sig AS sb FROM p JOIN t_{a} AS x ON x.row = p.ia "
               f"JOIN t_{b} AS y ON y.row = p.ib WHERE x.exact <> y.exact")
        dtype, width = (np.uint32, _near.NUM_PERM) if kind == "text" else (np.uint64, _near.SIM_BITS // 64)
        keep_a, keep_b, keep_s = [], [], []
        import duckdb

        try:
            for batch in self._pairs(sql):  # streamed: only pairs at or above the threshold are kept
                if not batch.num_rows:
                    continue
                ia = batch.column(0).to_numpy()
                ib = batch.column(1).to_numpy()
                sim = _near.similarity(kind or "num", _rows_of(batch.column(2), dtype, width),
                                       _rows_of(batch.column(3), dtype, width))
                ok = sim >= threshold
                keep_a.append(ia[ok])
                keep_b.append(ib[ok])
                keep_s.append(sim[ok])
        except duckdb.Error as e:  # out of memory or disk: one line naming the cap, not a traceback
            raise ValueError(msg("leakage.duckdb_failed", error=str(e).splitlines()[0])) from None
        if not keep_a:
            return Near(0, [])
        ia, ib, sim = np.concatenate(keep_a), np.concatenate(keep_b), np.concatenate(keep_s)
        return Near(int(len(np.unique(ib))), choose_examples(ia, ib, sim))
