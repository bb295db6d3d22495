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
from ._near import NUM_PERM, SIM_BITS, band_keys, similarity
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
_NEAR_TABLES = ("n_ma", "n_mc", "n_ca", "n_j", "n_p", "n_q")
_BYTES_PER_GROUP = 128  # memory cap / this = distinct pairs grouped in one pass


def _near_steps(a: str, b: str) -> list[str]:
    """Candidate near pairs of a and b, one table per step: `n_q(ia, ib, ea, sa)`.

    Each step is one join or one group-by with fixed-size columns, which DuckDB spills under
    its memory cap; the same steps as one query (a window over every band key, a DISTINCT
    fed by a join, the signatures joined in) ran out of memory at 30 M rows under 2 GB.
    """
    return [
        # a's band keys that b has too (a semi join on b's distinct keys)
        f"CREATE OR REPLACE TABLE n_ma AS SELECT ba.row, ba.band, ba.key FROM b_{a} AS ba "
        f"SEMI JOIN (SELECT band, key FROM b_{b} GROUP BY band, key) USING (band, key)",
        "CREATE OR REPLACE TABLE n_mc AS SELECT band, key, count(*) AS c FROM n_ma GROUP BY band, key",
        # at most BAND_CAP rows of a per key, the smallest row numbers: keys within the cap keep
        # all their rows; a window ranks the rows of the few keys above it.
        f"CREATE OR REPLACE TABLE n_ca AS SELECT row, band, key FROM n_ma "
        f"SEMI JOIN (SELECT band, key FROM n_mc WHERE c <= {BAND_CAP}) USING (band, key) UNION ALL "
        f"SELECT row, band, key FROM (SELECT *, row_number() OVER (PARTITION BY band, key ORDER BY row) AS rn "
        f"FROM n_ma SEMI JOIN (SELECT band, key FROM n_mc WHERE c > {BAND_CAP}) USING (band, key)) "
        f"WHERE rn <= {BAND_CAP}",
        "DROP TABLE n_ma",
        f"CREATE OR REPLACE TABLE n_j AS SELECT ca.row AS ia, bb.row AS ib "
        f"FROM n_ca AS ca JOIN b_{b} AS bb USING (band, key)",
        "DROP TABLE n_ca",
    ]


def _pairs_steps(a: str, passes: int) -> list[str]:
    """n_j → distinct pairs (a pair shares several bands) → n_q with a's digest and signature.

    The distinct pairs are grouped in `passes` slices of b's rows: one group-by over 120 M
    candidate pairs (30 M random rows) asked DuckDB for a 512 MiB hash table at once, above a
    2 GB cap; a slice's table fits.
    """
    out = ["CREATE OR REPLACE TABLE n_p (ia BIGINT, ib BIGINT)"]
    out += [f"INSERT INTO n_p SELECT ia, ib FROM n_j WHERE ib % {passes} = {k} GROUP BY ia, ib" for k in range(passes)]
    return out + ["DROP TABLE n_j",
                  f"CREATE OR REPLACE TABLE n_q AS SELECT p.ia, p.ib, x.exact AS ea, x.sig AS sa FROM n_p AS p "
                  f"JOIN t_{a} AS x ON x.row = p.ia",
                  "DROP TABLE n_p"]


_UNITS = {"": 1, "b": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _size(text: str) -> int | None:
    """DuckDB's display of a size ('1.8 GiB', '953.6 MiB') → bytes; None when not a size."""
    import re

    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", text or "")
    unit = _UNITS.get(m.group(2).lower()) if m else None
    return int(float(m.group(1)) * unit) if m and unit else None


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
        self._bands: dict[str, tuple[str, float | None]] = {}  # split -> layout of b_<split>

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
                self._run(f"INSERT INTO t_{split} "
                          "SELECT row, exact, label, grp, t, CAST(sig AS BLOB), valid FROM _part")
        finally:
            self.con.unregister("_part")
        c = self._cols[split]
        c["labels"] &= part.labels is not None
        c["groups"] &= part.groups is not None
        c["times"] &= part.times is not None
        self._n[split] = self._n.get(split, 0) + part.n
        old_kind, old_rows = self._sig.get(split, (kind, 0))
        self._sig[split] = (kind if old_kind == kind else None, old_rows + (part.n if kind else 0))

    def _band_table(self, split: str, kind: str, threshold: float) -> None:
        """``b_<split>(row, band, key)``: the band keys of the split's valid rows, for this threshold.

        Built when a search asks (the bands follow the threshold), from the stored signatures
        read back in batches: the same keys as `_near.band_keys` in process.
        """
        import duckdb
        import pyarrow as pa

        layout = (kind, threshold if kind != "text" else None)
        if self._bands.get(split) == layout:
            return
        dtype, width = (np.uint32, NUM_PERM) if kind == "text" else (np.uint64, SIM_BITS // 64)
        self._run(f"DROP TABLE IF EXISTS b_{split}")
        self._run(f"CREATE TABLE b_{split} (row BIGINT, band TINYINT, key UBIGINT)")
        step = _PAIR_BATCH * 4
        for lo in range(0, self._n.get(split, 0), step):  # row ranges: the rows were stored in order
            try:
                batch = self.con.sql(f"SELECT row, sig FROM t_{split} WHERE valid AND row >= {int(lo)} "
                                     f"AND row < {int(lo + step)}").to_arrow_table()
            except duckdb.Error as e:
                raise ValueError(msg("leakage.duckdb_failed", error=str(e).splitlines()[0])) from None
            if not batch.num_rows:
                continue
            keys = band_keys(kind, _rows_of(batch.column(1), dtype, width), threshold)
            nb = keys.shape[1]
            self.con.register("_bands", pa.table({"row": np.repeat(batch.column(0).to_numpy(), nb),
                                                  "band": np.tile(np.arange(nb, dtype=np.int8), batch.num_rows),
                                                  "key": keys.reshape(-1)}))
            try:
                self._run(f"INSERT INTO b_{split} SELECT * FROM _bands")
            finally:
                self.con.unregister("_bands")
        self._bands[split] = layout

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
        common = [r[0] for r in self._all(
            with_ + f"SELECT grp FROM ga JOIN gb USING (grp) ORDER BY grp LIMIT {MAX_GROUPS}")]
        # count(*) over a GROUP BY, not count(DISTINCT): a DISTINCT aggregate's hash table does not spill.
        na = self._one(f"SELECT count(*) FROM (SELECT grp FROM t_{a} GROUP BY grp)")[0]
        nb = self._one(f"SELECT count(*) FROM (SELECT grp FROM t_{b} GROUP BY grp)")[0]
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
                 # One group-by with fixed-size aggregates: it spills under the memory cap. (A
                 # DISTINCT (exact, label) feeding a second group-by ran out of memory at 30 M rows
                 # under a 2 GB cap, and a DISTINCT aggregate keeps its hash tables in memory.)
                 "bad AS (SELECT exact FROM u GROUP BY exact HAVING min(label) <> max(label)) ")
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
        if kind is None or kind != self.near_kind(b):
            return Near(0, [])
        try:
            self._band_table(a, kind, threshold)
            self._band_table(b, kind, threshold)
            for sql in _near_steps(a, b):
                self._run(sql)
            pairs = int(self._one("SELECT count(*) FROM n_j")[0])
            cap = _size(str(self._one("SELECT current_setting('memory_limit')")[0])) or (1 << 30)
            for sql in _pairs_steps(a, max(1, -(-pairs // max(cap // _BYTES_PER_GROUP, 1)))):
                self._run(sql)
            return self._near_scored(kind, b, threshold)
        finally:  # the steps' tables go, also after a failure (the first error is the one told)
            for t in _NEAR_TABLES:
                try:
                    self._run(f"DROP TABLE IF EXISTS {t}")
                except ValueError:
                    pass

    def _near_scored(self, kind: str | None, b: str, threshold: float) -> Near:
        sql = (f"SELECT q.ia, q.ib, q.sa, y.sig AS sb FROM n_q AS q JOIN t_{b} AS y "
               "ON y.row = q.ib WHERE q.ea <> y.exact")
        dtype, width = (np.uint32, NUM_PERM) if kind == "text" else (np.uint64, SIM_BITS // 64)
        keep_a, keep_b, keep_s = [], [], []
        import duckdb

        try:
            for batch in self._pairs(sql):  # streamed: only pairs at or above the threshold are kept
                if not batch.num_rows:
                    continue
                ia = batch.column(0).to_numpy()
                ib = batch.column(1).to_numpy()
                sim = similarity(kind or "num", _rows_of(batch.column(2), dtype, width),
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
