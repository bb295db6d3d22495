"""Which engine compares the splits, and the scan that feeds it (issue 17).

"memory" keeps every digest in numpy arrays (fast, the default for small inputs); "duckdb"
streams the same parts into an embedded DuckDB database that spills to disk under a memory
cap; "dask" scans and compares on a Dask cluster. "auto" picks duckdb for table files whose
total size is above `AUTO_BYTES` when duckdb is installed, else memory.
"""

from __future__ import annotations

import os
from typing import Any

from .._catalogue import msg
from ._scan import Options, Scan, Scanner
from ._sources import Source
from ._store import MemoryStore, Store

ENGINES = ("auto", "memory", "duckdb", "dask")
AUTO_BYTES = 2 << 30  # 2 GiB of table files: in-process digests would need several GiB


def _file_bytes(sources: list[Source]) -> int:
    total = 0
    for s in sources:
        for p in s.paths or ([s.path] if s.path else []):
            try:
                total += os.path.getsize(p)
            except OSError:
                pass
    return total


def choose(engine: str, sources: list[Source]) -> str:
    if engine not in ENGINES:
        raise ValueError(msg("leakage.bad_engine", given=engine, accepted=", ".join(ENGINES)))
    if engine != "auto":
        return engine
    if all(s.kind == "table" and (s.path or s.paths) for s in sources) and _file_bytes(sources) > AUTO_BYTES:
        try:
            import duckdb  # noqa: F401  (probe only)
        except ImportError:
            return "memory"
        return "duckdb"
    return "memory"


def scan_all(engine: str, sources: list[Source], opts: Options, *,
             memory_limit: str | None = None) -> tuple[Store, list[Scan]]:
    """Scan `sources` (train, [val,] test order) into the chosen engine's store."""
    name = choose(engine, sources)
    scanner = Scanner(opts)
    if name == "memory":
        mem = MemoryStore()
        scans = []
        for s in sources:
            sc = scanner.scan(s)
            mem.put(s.name, sc)
            scans.append(sc)
        return mem, scans
    if name == "dask":
        from ._dask import scan_on_dask

        return scan_on_dask(sources, scanner)
    from ._duck import DuckStore

    store: Any = DuckStore(memory_limit=memory_limit)
    try:
        scans = []
        for s in sources:
            sc = Scan(s)
            for part in scanner.parts(s, sc):
                store.add(s.name, part)
            scans.append(sc)
        store.finish()
    except BaseException:
        store.close()
        raise
    return store, scans
