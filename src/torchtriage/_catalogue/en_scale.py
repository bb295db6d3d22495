"""Split checks past one machine's memory: engines, shards, memory caps (issue 17)."""

MESSAGES = {
    "leakage.duckdb_failed": "the duckdb engine failed: {error}; a larger --memory-limit (or memory_limit=) or more free disk for its spill folder may help",
    "leakage.bad_engine": "engine={given!r}; accepted: {accepted}",
    "leakage.bad_memory_limit": "memory limit {given!r} was refused by DuckDB ({error}); accepted: a size such as 512MB, 4GB or 75%",
    "leakage.no_shards": "{spec}: no table files there; accepted: a folder or a glob pattern of {accepted} files",
    "leakage.mixed_schema": "{path} has other columns than {first} (extra: {extra}; missing: {missing}); accepted: shards of one split with the same columns",
    "leakage.need_scale": "the {engine} engine needs the optional package {module!r}; install it with: pip install 'torchtriage[{extra}]'",
    "leakage.dask_unsupported": "the dask engine reads table files (CSV, JSONL, Parquet; a file, folder or glob per split), not {given}; use engine='memory' or 'duckdb'",
    "leakage.cli.engine": "where the comparisons run: memory (in process), duckdb (out of core, spills to disk), dask (a Dask cluster), auto (duckdb above 2 GiB of files; default)",
    "leakage.cli.memory_limit": "memory cap of the duckdb engine, e.g. 2GB (default: a quarter of this machine's memory)",
    "leakage.cli.scheduler": "address of a running Dask scheduler for --engine dask (default: a local cluster of 2 workers)",
}
