"""Paired A/B of one training step with and without torchtriage, thread clock, one thread.

Each round enters every arm once (a fresh session), runs 24 untimed steps (a session analyses its
first steps in depth; a run pays that once), then times 8 steps; the figure is each arm's median
step against the first arm's. `baseline_again` (a second untimed-tool arm) shows the noise floor.

    python benchmarks/paired_ab.py gpt 24 baseline all baseline_again
    python benchmarks/paired_ab.py cnn 24 baseline all but:data_ledger,step_ledger

Arms: `baseline*` (no tool), `all` (the default checks), `only:a,b` (those checks), `but:a,b`
(the defaults without them). Workloads are `benchmarks/overhead.py`'s.
"""
import contextlib
import pathlib
import statistics
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import overhead as O
import torchtriage
from torchtriage._registry import DEFAULT_CHECKS

torch.set_num_threads(1)


def arm(spec, model, opt):
    if spec.startswith("baseline"):
        return contextlib.nullcontext()
    if spec == "all":
        return torchtriage.watch(model, opt, on_anomaly="record", report=False)
    if spec.startswith("only:"):
        checks = [c for c in spec[5:].split(",") if c]
    elif spec.startswith("but:"):
        left_out = spec[4:].split(",")
        checks = [c for c in DEFAULT_CHECKS if c not in left_out]
    else:
        raise SystemExit(f"paired_ab: unknown arm {spec!r}; accepted: baseline*, all, only:a,b, but:a,b")
    return torchtriage.watch(model, opt, checks=checks, on_anomaly="record", report=False)


def main(argv):
    workload, rounds, specs = argv[0], int(argv[1]), argv[2:]
    model, opt, batch, loss_fn = O.make(workload, "cpu")
    res = {s: [] for s in specs}
    for _ in range(rounds):
        for s in specs:
            with arm(s, model, opt):
                for _ in range(24):
                    O.step(model, opt, batch, loss_fn)
                for _ in range(8):
                    t = time.thread_time_ns()
                    O.step(model, opt, batch, loss_fn)
                    res[s].append(time.thread_time_ns() - t)
    base = statistics.median(res[specs[0]])
    print(f"workload={workload} rounds={rounds} steps/arm={8 * rounds} clock=thread threads=1")
    for s in specs:
        m = statistics.median(res[s])
        print(f"{s:40s} {m / 1e6:8.2f} ms  {m / base:.3f}x  ({(m - base) / 1e3:+.0f} us)")


if __name__ == "__main__":
    main(sys.argv[1:])
