"""The cluster engine: scans and comparisons as Dask jobs (issue 17).

Why Dask rather than Spark: the checks hash rows with this package's own numpy code, and Dask
runs that code unchanged on its workers (a partition is a pandas DataFrame), so the digests,
signatures and findings are the same as in process; it needs no JVM, installs from one extra,
and a `LocalCluster` of 2 worker processes runs in CI in seconds. The same job runs on a real
cluster by connecting a `distributed.Client` before the call (or `--scheduler ADDRESS`).

Table files (a file, folder or glob per split) are read and hashed on the workers, one part
per partition; other splits (arrays, datasets) are hashed here and compared on the cluster.
Each split becomes a Dask DataFrame ``row, exact, label, lshow, grp, t, s0.., valid`` and the
questions of `_store.Store` are answered with joins and group-bys on it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._catalogue import msg
from ._near import NUM_PERM, SIM_BITS, band_keys, similarity
from ._scan import Part, Scan, Scanner
from ._sources import Block, Source
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


def _need(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(msg("leakage.need_scale", engine="dask", module=module, extra="scale")) from None


def part_frame(part: Part, label_shown: dict[int, str]) -> Any:
    """A `Part` as a pandas DataFrame (one row per input row)."""
    import pandas as pd

    cols: dict[str, Any] = {"row": np.arange(part.start, part.start + part.n, dtype=np.int64),
                            "exact": part.exact.astype(np.uint64, copy=False)}
    if part.labels is not None:
        cols["label"] = part.labels.astype(np.uint64, copy=False)
        cols["lshow"] = pd.array([label_shown.get(int(w)) for w in part.labels.tolist()], dtype=object)
    if part.groups is not None:
        cols["grp"] = pd.array(part.groups, dtype=object)
    if part.times is not None:
        cols["t"] = part.times
    if part.sig is not None:
        sig = part.sig.reshape(part.n, -1)
        for k in range(sig.shape[1]):
            cols[f"s{k}"] = sig[:, k]
        cols["valid"] = np.asarray(part.valid, bool)
    return pd.DataFrame(cols)


def _chunk(df: Any) -> dict[str, Any]:
    """A pandas partition as the scanner's table chunk: numbers as float64, the rest as lists."""
    out: dict[str, Any] = {}
    for name in df.columns:
        s = df[name]
        if s.dtype.kind in "biuf":
            out[str(name)] = s.to_numpy(dtype=np.float64, na_value=np.nan)
        else:
            out[str(name)] = [None if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in s.tolist()]
    return out


def _scan_partition(df: Any, scanner: Scanner, src: Source, offsets: list[int],
                    partition_info: dict[str, Any] | None = None) -> Any:
    i = partition_info["number"] if partition_info else 0
    sc = Scan(src)
    block = Block(int(offsets[i]), len(df), cols=_chunk(df))
    part = scanner.part(src, block, sc) if len(df) else None
    if part is None:
        return _empty_meta(scanner, src)
    return part_frame(part, sc.label_shown)


def _empty_meta(scanner: Scanner, src: Source) -> Any:
    import pandas as pd

    o = scanner.opts
    cols: dict[str, Any] = {"row": np.zeros(0, np.int64), "exact": np.zeros(0, np.uint64)}
    if o.labels is not None:
        cols["label"] = np.zeros(0, np.uint64)
        cols["lshow"] = pd.array([], dtype=object)
    if o.groups is not None:
        cols["grp"] = pd.array([], dtype=object)
    if o.time is not None:
        cols["t"] = np.zeros(0, np.float64)
    width, dtype = scanner.near_width
    if width:
        for k in range(width):
            cols[f"s{k}"] = np.zeros(0, dtype)
        cols["valid"] = np.zeros(0, bool)
    return pd.DataFrame(cols)


def connect(address: str) -> Any:
    """A client of the Dask scheduler at `address` (the CLI's --scheduler); one line on failure."""
    distributed = _need("distributed")
    try:
        return distributed.Client(address, timeout="10s")
    except (OSError, TimeoutError, ValueError) as e:
        raise ValueError(f"--scheduler {address}: cannot connect to a Dask scheduler ({e})") from None


def _read(dd: Any, src: Source) -> Any:
    from ._tables import file_format

    if src.paths:
        paths = src.paths
    else:
        assert src.path is not None  # a file source: one path, or its shards
        paths = [src.path]
    fmt = file_format(paths[0])
    if fmt == "parquet":
        return dd.read_parquet(paths)
    if fmt == "csv":
        sep = "\t" if paths[0].lower().endswith(".tsv") else ","
        return dd.read_csv(paths, sep=sep, dtype=str, keep_default_na=False, blocksize="64MB")
    return dd.read_json(paths, lines=True, blocksize=64 << 20, dtype=False, convert_dates=False)


def scan_on_dask(sources: list[Source], scanner: Scanner) -> tuple[DaskStore, list[Scan]]:
    """Scan `sources` into Dask DataFrames; file splits are read and hashed on the workers."""
    dd = _need("dask.dataframe")
    store = DaskStore()
    try:
        files = all(s.kind == "table" and (s.path or s.paths) for s in sources)
        on_workers = files and not (scanner.opts.stats or scanner.opts.tokens)
        scans = []
        for s in sources:
            sc = Scan(s)
            if on_workers:
                # The first chunk, here: fixes the shared columns and scale exactly as in process.
                first = next(iter(s.blocks(scanner.opts.chunk)), None)
                if first is not None and first.n:
                    probe = scanner.part(s, first, sc)
                    scanner.near_width = ((probe.sig.reshape(probe.n, -1).shape[1], probe.sig.dtype)
                                          if probe.sig is not None else (0, np.uint64))
                try:
                    ddf = _read(dd, s)
                    lengths = ddf.map_partitions(len).compute()
                except Exception as e:  # a reader's own error types (pyarrow, pandas): one clear line
                    raise ValueError(msg("leakage.unreadable", path=s.what, error=str(e).splitlines()[0])) from None
                offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(int).tolist()
                light = dataclasses.replace(s, obj=None)
                frame = ddf.map_partitions(_scan_partition, scanner, light, offsets,
                                           meta=_empty_meta(scanner, light))
                sc.n = int(offsets[-1])
            else:
                import pandas as pd

                frames = [part_frame(p, {}) for p in scanner.parts(s, sc)]
                whole = pd.concat(frames, ignore_index=True) if frames else None
                if whole is None:
                    frame = None
                else:
                    if "lshow" in whole:
                        whole["lshow"] = [sc.label_shown.get(int(w)) for w in whole["label"].tolist()]
                    frame = dd.from_pandas(whole, npartitions=2)
            store.put(s.name, frame, sc.n)
            scans.append(sc)
    except BaseException:
        store.close()
        raise
    return store, scans


class DaskStore(Store):
    engine = "dask"

    def __init__(self) -> None:
        distributed = _need("distributed")
        _need("dask.dataframe")
        try:
            self.client = distributed.get_client()
            self._own = None
        except ValueError:  # no client yet: a local cluster of 2 worker processes, ours to close
            cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                               dashboard_address="127.0.0.1:0", silence_logs=50)
            self._own = cluster
            self.client = distributed.Client(cluster)
        self.frames: dict[str, Any] = {}
        self.n: dict[str, int] = {}

    def put(self, split: str, frame: Any, n: int) -> None:
        self.frames[split] = frame.persist() if frame is not None else None
        self.n[split] = n

    def close(self) -> None:
        self.frames.clear()
        own = getattr(self, "_own", None)
        if own is not None:
            self.client.close()
            own.close()
            self._own = None

    def _cols(self, split: str) -> list[str]:
        f = self.frames.get(split)
        return list(f.columns) if f is not None else []

    def rows(self, split: str) -> int:
        return self.n.get(split, 0)

    def has_labels(self, split: str) -> bool:
        return "label" in self._cols(split)

    def has_groups(self, split: str) -> bool:
        return "grp" in self._cols(split)

    def has_times(self, split: str) -> bool:
        return "t" in self._cols(split)

    def near_kind(self, split: str) -> str | None:
        f = self.frames.get(split)
        if f is None or "valid" not in f.columns:
            return None
        return "text" if f["s0"].dtype == np.uint32 else "num"

    def _compute(self, *xs: Any) -> Any:
        import dask

        return dask.compute(*xs)

    def group_overlap(self, a: str, b: str) -> GroupOverlap | None:
        ga = self.frames[a].groupby("grp").size().rename("ca")
        gb = self.frames[b].groupby("grp").size().rename("cb")
        both = ga.to_frame().join(gb.to_frame(), how="inner")
        na, nb, common = self._compute(ga.size, gb.size, both)
        if not len(common):
            return None
        keys = sorted(common.index.tolist())
        return GroupOverlap(keys[:MAX_GROUPS], len(keys), int(na), int(nb),
                            int(common["ca"].sum()), int(common["cb"].sum()))

    def time_order(self, a: str, b: str) -> TimeOrder | None:
        end = self._compute(self.frames[a]["t"].max())[0]
        if end is None or np.isnan(end):
            return None
        fb = self.frames[b]
        early = fb[fb["t"] < end]
        count, start, first = self._compute(early.shape[0], fb["t"].min(), early.nsmallest(MAX_EXAMPLES, ["t", "row"]))
        if not count:
            return None
        first = first.sort_values(["t", "row"])
        return TimeOrder(float(end), float(start), int(count),
                         [(int(r), float(t)) for r, t in zip(first["row"], first["t"])])

    def exact(self, a: str, b: str, exclude_b: np.ndarray | None = None) -> Matches:
        fa = self.frames[a].groupby("exact")["row"].min().rename("ra").to_frame()
        fb = self.frames[b][["exact", "row"]]
        if exclude_b is not None:
            skip = set(np.nonzero(exclude_b)[0].tolist())
            fb = fb[~fb["row"].isin(list(skip))]
        hits = fb.join(fa, on="exact", how="inner")
        count, first = self._compute(hits.shape[0], hits.nsmallest(MAX_EXAMPLES, "row"))
        first = first.sort_values("row")
        return Matches(int(count), [(int(i), int(j)) for i, j in zip(first["ra"], first["row"])])

    def repeats(self, split: str) -> Repeats:
        g = self.frames[split].groupby("exact")["row"].agg(["count", "min"])
        dup = g[g["count"] > 1]
        distinct, ndup, first = self._compute(g.shape[0], dup.shape[0], dup.nsmallest(MAX_EXAMPLES, "min"))
        ex: list[list[int]] = []
        if len(first):
            keys = np.asarray(first.sort_values("min").index.to_numpy(), np.uint64)  # digests above 2**63 stay exact
            f = self.frames[split]
            rows = self._compute(f[f["exact"].isin(keys)][["exact", "row"]])[0]
            for k in keys:
                ex.append(sorted(rows.loc[rows["exact"] == k, "row"].tolist())[:4])
        return Repeats(self.rows(split) - int(distinct), int(ndup), ex)

    def conflicts(self, splits: list[str]) -> Conflicts:
        import dask.dataframe as dd

        parts = [self.frames[s][["row", "exact", "label", "lshow"]].assign(k=k) for k, s in enumerate(splits)]
        u = dd.concat(parts)
        nl = u.groupby("exact")["label"].nunique()
        bad = nl[nl > 1]
        count, first = self._compute(bad.shape[0], bad.reset_index()["exact"].nsmallest(MAX_EXAMPLES))
        if not count:
            return Conflicts(0, [])
        keys = np.sort(np.asarray(first.to_numpy(), np.uint64))
        rows = self._compute(u[u["exact"].isin(keys)])[0].sort_values(["k", "row"])
        examples = []
        for key in keys:
            sel = rows[rows["exact"] == key][:6]
            examples.append([(int(k), int(r), s if s is not None else "?")
                             for k, r, s in zip(sel["k"], sel["row"], sel["lshow"])])
        return Conflicts(int(count), examples)

    def _bands(self, split: str, kind: str, threshold: float) -> Any:
        f = self.frames[split]
        width = NUM_PERM if kind == "text" else SIM_BITS // 64
        sig_cols = [f"s{k}" for k in range(width)]

        def explode(df: Any) -> Any:
            import pandas as pd

            df = df[df["valid"]]
            sig = df[sig_cols].to_numpy()
            bands = band_keys(kind, sig.astype(np.uint32 if kind == "text" else np.uint64), threshold)
            nb = bands.shape[1]
            return pd.DataFrame({"row": np.repeat(df["row"].to_numpy(), nb),
                                 "band": np.tile(np.arange(nb, dtype=np.int8), len(df)),
                                 "key": bands.reshape(-1).astype(np.uint64)})

        import pandas as pd

        meta = pd.DataFrame({"row": np.zeros(0, np.int64), "band": np.zeros(0, np.int8), "key": np.zeros(0, np.uint64)})
        return f.map_partitions(explode, meta=meta), sig_cols

    def near(self, a: str, b: str, threshold: float) -> Near:
        kind = self.near_kind(a) or "num"
        ba, sig_cols = self._bands(a, kind, threshold)
        bb, _ = self._bands(b, kind, threshold)
        # Per band key, the BAND_CAP smallest rows of a (as in process), then the candidate pairs.
        ca = ba.shuffle(on=["band", "key"]).map_partitions(
            lambda df: df.sort_values("row").groupby(["band", "key"], sort=False).head(BAND_CAP), meta=ba._meta)
        pairs = ca.merge(bb, on=["band", "key"], suffixes=("_a", "_b"))[["row_a", "row_b"]].drop_duplicates()
        keep = ["row", "exact", *sig_cols]
        fa = self.frames[a][keep].rename(columns={c: f"{c}_a" for c in keep})
        fb = self.frames[b][keep].rename(columns={c: f"{c}_b" for c in keep})
        joined = pairs.merge(fa, on="row_a").merge(fb, on="row_b")
        dtype = np.uint32 if kind == "text" else np.uint64

        def score(df: Any) -> Any:
            import pandas as pd

            sa = df[[f"{c}_a" for c in sig_cols]].to_numpy().astype(dtype)
            sb = df[[f"{c}_b" for c in sig_cols]].to_numpy().astype(dtype)
            sim = similarity(kind, sa, sb) if len(df) else np.zeros(0)
            keep = (sim >= threshold) & (df["exact_a"].to_numpy() != df["exact_b"].to_numpy())
            return pd.DataFrame({"ia": df["row_a"].to_numpy()[keep], "ib": df["row_b"].to_numpy()[keep],
                                 "sim": np.asarray(sim, np.float64)[keep]})

        import pandas as pd

        meta = pd.DataFrame({"ia": np.zeros(0, np.int64), "ib": np.zeros(0, np.int64), "sim": np.zeros(0)})
        hits = self._compute(joined.map_partitions(score, meta=meta))[0]
        if not len(hits):
            return Near(0, [])
        ia, ib, sim = (hits[c].to_numpy() for c in ("ia", "ib", "sim"))
        return Near(int(len(np.unique(ib))), choose_examples(ia.astype(np.int64), ib.astype(np.int64), sim))
