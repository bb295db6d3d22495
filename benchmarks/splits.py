"""Benchmark of `torchtriage.check_splits` at scale (issue 6, "Scale").

Generates ROWS x COLS float32 rows in chunks into two memory-mapped .npy files (train and
test, 80/20), copies DUPS random train rows into test, runs `check_splits`, asserts that
exactly DUPS cross-split duplicates are found, and prints wall time and peak memory
(tracemalloc: Python + numpy allocations; ru_maxrss: the process). When deepchecks is
installed, it runs `TrainTestSamplesMix` on the same data and prints the time ratio.

    python benchmarks/splits.py                 # 1,000,000 x 50
    python benchmarks/splits.py --rows 20000    # quick
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
import tracemalloc

import numpy as np


def make(path: str, rows: int, cols: int, seed: int, chunk: int = 100_000) -> np.ndarray:
    arr = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, cols))
    rng = np.random.default_rng(seed)
    for start in range(0, rows, chunk):
        stop = min(rows, start + chunk)
        arr[start:stop] = rng.standard_normal((stop - start, cols), dtype=np.float32)
    arr.flush()
    return arr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--cols", type=int, default=50)
    ap.add_argument("--dups", type=int, default=1000, help="test rows copied from train")
    ap.add_argument("--no-near", action="store_true", help="skip the near-duplicate search")
    args = ap.parse_args()
    import torchtriage

    n_train = int(args.rows * 0.8)
    n_test = args.rows - n_train
    dups = min(args.dups, n_test)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        train = make(os.path.join(tmp, "train.npy"), n_train, args.cols, 1)
        test = make(os.path.join(tmp, "test.npy"), n_test, args.cols, 2)
        rng = np.random.default_rng(3)
        src = np.sort(rng.choice(n_train, dups, replace=False))
        dst = np.sort(rng.choice(n_test, dups, replace=False))
        test[dst] = train[src]
        test.flush()
        print(f"generated {args.rows:,} rows x {args.cols} float32 columns in {time.perf_counter() - t0:.1f} s "
              f"({dups} duplicates injected)", file=sys.stderr)
        train = np.load(os.path.join(tmp, "train.npy"), mmap_mode="r")
        test = np.load(os.path.join(tmp, "test.npy"), mmap_mode="r")

        # Time without tracemalloc (it slows every allocation several-fold), then peak memory in a
        # second, traced pass; the first pass prints its progress lines on stderr.
        t0 = time.perf_counter()
        report = torchtriage.check_splits(train, test, near=not args.no_near, progress=True)
        ours = time.perf_counter() - t0
        tracemalloc.start()
        torchtriage.check_splits(train, test, near=not args.no_near, progress=False)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        found = report.filter(code="data.exact_duplicate")
        n_found = found[0].evidence["duplicated_rows"] if found else 0
        assert n_found == dups, f"expected {dups} duplicates, found {n_found}"
        near = report.filter(code="data.near_duplicate")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"torchtriage.check_splits: {args.rows:,} rows x {args.cols} cols: {ours:.2f} s, "
              f"{args.rows / ours:,.0f} rows/s; peak traced memory {peak / 2**20:.1f} MiB "
              f"(data itself {args.rows * args.cols * 4 / 2**20:.0f} MiB, memory-mapped); max RSS {rss:.0f} MiB")
        print(f"found {n_found} of {dups} injected cross-split duplicates; "
              f"near-duplicate findings: {len(near)}")
        try:
            import pandas as pd
            from deepchecks.tabular import Dataset
            from deepchecks.tabular.checks import TrainTestSamplesMix
        except ImportError:
            print("deepchecks is not installed: no ratio against TrainTestSamplesMix")
            return 0
        except Exception as e:  # installed but broken against this environment (e.g. its scikit-learn)
            print(f"deepchecks does not import here ({type(e).__name__}: {e}): no ratio against TrainTestSamplesMix")
            return 0
        cols = [f"c{i}" for i in range(args.cols)]
        dtr = Dataset(pd.DataFrame(np.asarray(train), columns=cols), cat_features=[])
        dte = Dataset(pd.DataFrame(np.asarray(test), columns=cols), cat_features=[])
        t0 = time.perf_counter()
        TrainTestSamplesMix().run(dtr, dte)
        theirs = time.perf_counter() - t0
        print(f"deepchecks TrainTestSamplesMix: {theirs:.2f} s; ratio deepchecks/torchtriage = {theirs / ours:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
