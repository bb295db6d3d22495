"""超出单机内存的划分检查：引擎、分片、内存上限（issue 17）。"""

MESSAGES = {
    "leakage.duckdb_failed": "duckdb 引擎失败：{error}；增大 --memory-limit（或 memory_limit=）或为溢写目录留出更多磁盘空间可能有帮助",
    "leakage.bad_engine": "engine={given!r}；可接受：{accepted}",
    "leakage.bad_memory_limit": "DuckDB 拒绝了内存上限 {given!r}（{error}）；可接受：如 512MB、4GB 或 75% 的大小",
    "leakage.no_shards": "{spec}：其中没有表格文件；可接受：由 {accepted} 文件组成的文件夹或通配模式",
    "leakage.mixed_schema": "{path} 的列与 {first} 不同（多出：{extra}；缺少：{missing}）；可接受：同一划分的分片须有相同的列",
    "leakage.need_scale": "{engine} 引擎需要可选依赖 {module!r}；请安装：pip install 'torchtriage[{extra}]'",
    "leakage.dask_unsupported": "dask 引擎读取表格文件（CSV、JSONL、Parquet；每个划分一个文件、文件夹或通配模式），而不是 {given}；请使用 engine='memory' 或 'duckdb'",
    "leakage.cli.engine": "比较在哪里运行：memory（进程内）、duckdb（外存，溢写到磁盘）、dask（Dask 集群）、auto（文件超过 2 GiB 时用 duckdb；默认）",
    "leakage.cli.memory_limit": "duckdb 引擎的内存上限，如 2GB（默认：本机内存的四分之一）",
    "leakage.cli.scheduler": "--engine dask 使用的 Dask 调度器地址（默认：2 个 worker 的本地集群）",
}
