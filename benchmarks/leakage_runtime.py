"""Cost of the runtime leakage check (issue 14), per million rows.

    PYTHONPATH=src python benchmarks/leakage_runtime.py [--rows 1000000] [--cols 50] [--big 10000000]

Measures, on whatever device is given (`--device cuda` on a GPU machine):
  * split time: fingerprint every row of the split dataset, build the sketch, place one
    80/20 draw, queue the duplicate and statistics numbers (`LeakageWatch.observe`), then read
    them (`flags.resolve()`), per million rows;
  * batch time: fingerprint + match training batches of 256 rows (what each step adds),
    per million rows trained on;
  * state: bytes the check keeps (sketch, draw, per-model marks), per million rows, and for
    `--big` rows (the sketch caps the kept digests at 2**20 by sampling);
  * rows known by index (a list of samples, files read on access): split time, state, and the
    DataLoader batches of 256 indices looked up and marked, per million rows.
Timings on a shared CPU are noisy: run it twice and keep the lower figure.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import TensorDataset

from torchtriage._leakage._runtime import LeakageWatch
from torchtriage._leakage._runtime._fingerprint import row_keys


class _Session:
    """The two things LeakageWatch.observe needs from a Session when driven directly."""

    def add(self, finding):
        return finding

    def model_label(self, model):
        return "model"


def state_bytes(watch: LeakageWatch) -> int:
    total = 0
    for b in watch.bases:
        parts = [b.uk, b.first, *(d.side for d in b.draws if d.side is not None),
                 *b.trained.values(), *b.evaluated.values()]
        if b.keys is not None:
            parts.append(b.keys)
        unique = {t.data_ptr(): t for t in parts}  # a base known by index shares `uk` and `first`
        total += sum(t.numel() * t.element_size() for t in unique.values())
    return total


def split_cost(rows: int, cols: int, device: str) -> tuple[float, int, int]:
    X = torch.randn(rows, cols, device=device)
    watch = LeakageWatch()
    watch.session = _Session()  # on_start is not called: no session hooks in a benchmark
    from torchtriage import _deferred
    watch.flags = _deferred.DeferredFlags()
    watch.bases, watch.fits, watch.pending, watch.steps, watch.redraws, watch._families = [], [], [], 0, {}, 0
    ds = TensorDataset(X)
    perm = torch.randperm(rows)
    k = int(0.8 * rows)
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    draw = watch.observe(ds, X, [perm[:k], perm[k:]], None, "random_split")
    watch.flags.resolve()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    draw.base.mark(draw.base.trained, 1, draw.base.positions(row_keys(X[:256])))
    return seconds, state_bytes(watch), draw.base.rate


def step_ratio(cols: int, device: str, steps: int = 200) -> tuple[float, float]:
    """Per batch of 256: the check's fingerprint + match, and a plain training step of an MLP
    (cols -> 256 -> 256 -> 2, SGD), timed alternately in one process (robust to a busy machine)."""
    X = torch.randn(100_000, cols, device=device)
    watch = LeakageWatch()
    from torchtriage import _deferred
    watch.session = _Session()
    watch.flags = _deferred.DeferredFlags()
    watch.bases, watch.fits, watch.pending, watch.steps, watch.redraws, watch._families = [], [], [], 0, {}, 0
    perm = torch.randperm(len(X))
    base = watch.observe(TensorDataset(X), X, [perm[:80_000], perm[80_000:]], None, "random_split").base
    model = torch.nn.Sequential(torch.nn.Linear(cols, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    y = torch.randint(0, 2, (len(X),), device=device)
    t_check = t_step = 0.0
    for i in range(steps):
        xb, yb = X[i * 256:(i + 1) * 256], y[i * 256:(i + 1) * 256]
        t0 = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        with torch.no_grad():
            base.mark(base.trained, 1, base.positions(row_keys(xb)))
        if device == "cuda":
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        if i >= 10:
            t_step += t1 - t0
            t_check += t2 - t1
    n = steps - 10
    return t_check / n, t_step / n


def batch_cost(rows: int, cols: int, device: str) -> float:
    X = torch.randn(rows, cols, device=device)
    watch = LeakageWatch()
    from torchtriage import _deferred
    watch.session = _Session()
    watch.flags = _deferred.DeferredFlags()
    watch.bases, watch.fits, watch.pending, watch.steps, watch.redraws, watch._families = [], [], [], 0, {}, 0
    perm = torch.randperm(rows)
    draw = watch.observe(TensorDataset(X), X, [perm[: int(0.8 * rows)], perm[int(0.8 * rows):]], None, "random_split")
    base = draw.base
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(0, rows, 256):
        base.mark(base.trained, 1, base.positions(row_keys(X[i:i + 256])))
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def index_cost(rows: int) -> tuple[float, float, int]:
    """A dataset known by its indices only (`Base.indexed`): a random_split's draw, then the
    sampler's batches of 256 indices (Python ints, as a DataLoader hands them) looked up and
    marked as trained."""
    watch = LeakageWatch()
    from torchtriage import _deferred
    watch.session = _Session()
    watch.flags = _deferred.DeferredFlags()
    watch.bases, watch.fits, watch.pending, watch.steps, watch.redraws, watch._families = [], [], [], 0, {}, 0
    samples = range(rows)  # what the base keeps does not depend on the samples' content
    perm = torch.randperm(rows)
    k = int(0.8 * rows)
    t0 = time.perf_counter()
    base = watch.observe(samples, None, [perm[:k], perm[k:]], None, "random_split").base
    t1 = time.perf_counter()
    order = torch.randperm(rows).tolist()
    t2 = time.perf_counter()
    for i in range(0, rows, 256):
        pos = base.index_positions(torch.tensor(order[i:i + 256], dtype=torch.int64))
        base.mark(base.trained, 1, pos)
    t3 = time.perf_counter()
    return t1 - t0, t3 - t2, state_bytes(watch)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--cols", type=int, default=50)
    p.add_argument("--big", type=int, default=10_000_000)
    p.add_argument("--big-cols", type=int, default=8)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    per_m = 1e6 / a.rows
    s, state, rate = split_cost(a.rows, a.cols, a.device)
    print(f"split of {a.rows:,} rows x {a.cols} float32 on {a.device}: {s * per_m:.2f} s per million rows; "
          f"state {state * per_m / 2**20:.1f} MiB per million rows (sampling rate 1/{rate})")
    b = batch_cost(a.rows, a.cols, a.device)
    print(f"training batches of 256: {b * per_m:.2f} s per million rows trained on")
    check, step = step_ratio(a.cols, a.device)
    print(f"per batch of 256: check {check * 1e3:.3f} ms, MLP training step {step * 1e3:.3f} ms "
          f"(+{100 * check / step:.0f}%)")
    s, b, state = index_cost(a.rows)
    print(f"rows known by index ({a.rows:,}): split {s * per_m:.2f} s, batches of 256 indices "
          f"{b * per_m:.2f} s per million rows; state {state * per_m / 2**20:.1f} MiB per million rows")
    if a.big:
        s, state, rate = split_cost(a.big, a.big_cols, a.device)
        print(f"split of {a.big:,} rows x {a.big_cols}: {s:.1f} s; state {state / 2**20:.1f} MiB "
              f"(sketch: 1 digest in {rate} kept)")


if __name__ == "__main__":
    main()
