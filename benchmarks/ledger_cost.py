"""What the data ledger (issue 25) costs per DataLoader batch: the same training loop over a
DataLoader, timed alternately with every default check and with every default check but the
ledger, in one process. The ledger's share is the difference; the first epoch of a loader also
pays the content digests, later epochs only the index bookkeeping.

    python benchmarks/ledger_cost.py [--workload cnn|mlp] [--rounds 6] [--epochs 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def make(workload: str):
    torch.manual_seed(0)
    if workload == "cnn":
        X, y = torch.randn(2048, 3, 32, 32), torch.randint(0, 10, (2048,))
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                              nn.Flatten(), nn.Linear(32, 10))
    else:
        X, y = torch.randn(8192, 64), torch.randint(0, 10, (8192,))
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    return DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True), model


def run(mode: str, workload: str, epochs: int) -> float:
    import torchtriage
    from torchtriage._registry import DEFAULT_CHECKS

    loader, model = make(workload)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    checks = list(DEFAULT_CHECKS) if mode == "ledger" else [c for c in DEFAULT_CHECKS if c != "data_ledger"]
    with torchtriage.watch(model, opt, checks=checks, on_anomaly="record", report=False):
        for x, y in loader:  # untimed: the checks' first steps, and the ledger's first pass
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        t0 = time.perf_counter()
        for _ in range(epochs):
            for x, y in loader:
                opt.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
        return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="cnn", choices=("cnn", "mlp"))
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--epochs", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {"ledger": [], "without": []}
    for _ in range(a.rounds):
        for mode in times:
            times[mode].append(run(mode, a.workload, a.epochs))
    on, off = statistics.median(times["ledger"]), statistics.median(times["without"])
    print(f"{a.workload}: with the ledger {on:.3f} s, without {off:.3f} s (median of {a.rounds}): x{on / off:.3f}")


if __name__ == "__main__":
    main()
