"""Split checks past one machine's memory (issue 17): 10 M and 100 M rows × 20 columns.

Generates train/test Parquet shards with DuckDB (no rows pass through Python) with injected
leaks: test rows copied from train (exact duplicates), test rows copied with every value
moved by up to 2% and rounded to 4 decimals (near duplicates: a re-measured or re-exported
row), and test rows given a train user (group overlap). Then runs the same `torchtriage
splits` check on each engine in a fresh process and prints wall time, the peak RSS of that
process tree (sampled every 0.2 s), the recall of each injected leak and the precision of
the near-duplicate flags (the test rows flagged are recorded by a wrapper around the
engines' example chooser, which sees every pair kept, so no second run is needed).

    python benchmarks/splits_scale.py --rows 10000000
    python benchmarks/splits_scale.py --rows 100000000 --engines duckdb --memory-limit 2GB
    python benchmarks/splits_scale.py --rows 1000000 --engines memory,duckdb,dask   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

COLS = 18            # features; plus a user (group) column and a label: 20 columns
EVERY_DUP = 1000     # test row j is an exact copy of a train row when j % EVERY_DUP == 0
EVERY_NEAR = 1000    # ... a near copy (values x (1 +- 2%), 4 decimals) when j % EVERY_NEAR == 1
NEAR_NOISE = 0.02
EVERY_GROUP = 5000   # ... has a train user when j % EVERY_GROUP == 2


def generate(root: str, rows: int, shards: int) -> dict[str, int]:
    import duckdb

    n_train = rows * 4 // 5
    n_test = rows - n_train
    con = duckdb.connect()
    feat = lambda src: ", ".join(  # noqa: E731 - a formula per column, of a row index `src`
        f"((hash({src} * {COLS} + {k}) % 2000003) / 1000001.5 - 1.0) AS f{k}" for k in range(COLS))
    os.makedirs(os.path.join(root, "train"))
    os.makedirs(os.path.join(root, "test"))
    for s in range(shards):
        lo, hi = n_train * s // shards, n_train * (s + 1) // shards
        con.execute(f"COPY (SELECT 'u' || (i // 10) AS user, {feat('i')}, (hash(i) % 10)::INTEGER AS label "
                    f"FROM range({lo}, {hi}) t(i)) TO '{root}/train/part-{s:03d}.parquet' (FORMAT parquet)")
        lo, hi = n_test * s // shards, n_test * (s + 1) // shards
        src = f"CASE WHEN j % {EVERY_DUP} IN (0, 1) THEN (j * 7919) % {n_train} ELSE {n_train} + j END"
        cols = ", ".join(  # a near copy: each value moved by up to NEAR_NOISE of itself, rounded
            f"CASE WHEN j % {EVERY_NEAR} = 1 THEN round(f{k} * (1 + {NEAR_NOISE} * "
            f"((hash(j * {COLS} + {k} + 7) % 2001) / 1000.0 - 1)), 4) ELSE f{k} END AS f{k}" for k in range(COLS))
        con.execute(f"COPY (SELECT CASE WHEN j % {EVERY_GROUP} = 2 THEN 'u' || ((j * 31) % {n_train} // 10) "
                    f"ELSE 'v' || (j // 10) END AS user, {cols}, (hash(src) % 10)::INTEGER AS label "
                    f"FROM (SELECT j, {src} AS src, {feat('src')} FROM range({lo}, {hi}) t(j))) "
                    f"TO '{root}/test/part-{s:03d}.parquet' (FORMAT parquet)")
    injected = {"exact": len(range(0, n_test, EVERY_DUP)), "near": len(range(1, n_test, EVERY_NEAR)),
                "group_rows": len(range(2, n_test, EVERY_GROUP))}
    return injected


def _tree_rss(pid: int) -> int:
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.Error:
            pass
    return total


# The check run as `torchtriage splits ...` with the engines' example chooser wrapped: it sees
# every pair at or above the threshold, so the test rows flagged are written to a side file.
DRIVER = """
import json, sys
import numpy as np
from torchtriage._leakage import _dask, _duck, _store
from torchtriage._cli import main
side, argv = sys.argv[1], sys.argv[2:]
orig = _store.choose_examples
def record(ia, ib, sim):
    rows = np.unique(np.asarray(ib, np.int64))
    with open(side, "w") as fh:
        json.dump({"flagged": int(len(rows)), "injected_found": int(np.count_nonzero(rows %% %(every)d == 1))}, fh)
    return orig(ia, ib, sim)
_store.choose_examples = _duck.choose_examples = _dask.choose_examples = record
sys.exit(main(argv))
"""


def run_engine(root: str, engine: str, memory_limit: str | None, near: bool) -> dict:
    out = os.path.join(root, f"report-{engine}.json")
    side = os.path.join(root, f"near-{engine}.json")
    cmd = [sys.executable, "-c", DRIVER % {"every": EVERY_NEAR}, side, "splits", f"{root}/train", f"{root}/test",
           "--group", "user", "--label", "label", "--engine", engine, "--json", out, "--quiet"]
    if not near:
        cmd.append("--no-near")
    if memory_limit and engine == "duckdb":
        cmd += ["--memory-limit", memory_limit]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            time.sleep(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    err = ""
    for line in proc.stderr:  # the check's progress lines, passed on as they come
        sys.stderr.write(f"  [{engine} {time.perf_counter() - t0:.0f} s] {line}")
        sys.stderr.flush()
        err += line
    proc.wait()
    th.join()
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1) or not os.path.exists(out):  # exit 1 is "findings", unless no report came
        return {"engine": engine, "error": err.strip().splitlines()[-1] if err.strip() else proc.returncode}
    with open(out) as fh:
        report = json.load(fh)
    found = {f["code"]: f["evidence"] for f in report["findings"]}
    flags = {"flagged": 0, "injected_found": 0}
    if os.path.exists(side):
        with open(side) as fh:
            flags = json.load(fh)
    return {"engine": engine, "seconds": wall, "peak_rss_mib": peak[0] / 2**20,
            "exact": found.get("data.exact_duplicate", {}).get("duplicated_rows", 0),
            "near": found.get("data.near_duplicate", {}).get("rows_with_near_duplicate", 0),
            "near_found": flags["injected_found"],
            "group_rows": found.get("data.group_overlap", {}).get("rows_in_test", 0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--shards", type=int, default=0, help="Parquet files per split (default: one per 2 M rows)")
    ap.add_argument("--engines", default="memory,duckdb,dask")
    ap.add_argument("--memory-limit", default="2GB", help="the duckdb engine's cap")
    ap.add_argument("--no-near", action="store_true")
    ap.add_argument("--dir", help="keep the data here (default: a temporary folder)")
    args = ap.parse_args()
    shards = args.shards or max(1, args.rows // 2_000_000)
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        t0 = time.perf_counter()
        injected = generate(root, args.rows, shards)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
        print(f"generated {args.rows:,} rows x 20 columns in {shards} shards per split, {size / 2**30:.2f} GiB "
              f"Parquet, in {time.perf_counter() - t0:.0f} s; injected: {injected}", flush=True)
        for engine in args.engines.split(","):
            r = run_engine(root, engine, args.memory_limit, not args.no_near)
            if "error" in r:
                print(f"{engine:>7}: failed: {r['error']}", flush=True)
                continue
            # Exact copies and shared users cannot be over-counted (64-bit digests, exact keys), so
            # found/injected is their recall; near flags are scored against the injected rows.
            hit = r["near_found"]
            recall = (f"exact {r['exact']}/{injected['exact']}, "
                      f"users' rows {r['group_rows']}/{injected['group_rows']}, "
                      f"near: {r['near']} rows flagged, {hit} of the {injected['near']} injected "
                      f"(recall {hit / max(injected['near'], 1):.1%}, precision {hit / max(r['near'], 1):.1%})")
            print(f"{engine:>7}: {r['seconds']:.0f} s, peak RSS {r['peak_rss_mib']:.0f} MiB, "
                  f"{args.rows / r['seconds']:,.0f} rows/s; found {recall}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
