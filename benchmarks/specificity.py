"""Specificity of the default checks on correct code: every loop of the clean corpus
(tests/corpus/, correct training loops taken from public projects) runs under all default
checks, as `watch(models, optimizers)` and as the discovering session of `torchtriage run`;
the table counts the loops run and the findings by check family and severity. On correct code
every error and warning is a false alarm.

    python benchmarks/specificity.py                  # the table
    python benchmarks/specificity.py --list           # also each finding, with its loop
    PYTHONPATH=/other/checkout/src python benchmarks/specificity.py   # another version's table
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import torch  # noqa: E402

import corpus  # noqa: E402
import torchtriage  # noqa: E402
from torchtriage._session import Session  # noqa: E402

_CHECKS = ("triage", "nonfinite", "gradients", "silent", "dynamics", "leakage", "repro")
# `silent.*` codes that the dynamics check makes (evaluation and metric code).
_DYNAMICS_SILENT = {"silent.metric_broadcast", "silent.softmax_single_unit", "silent.softmax_over_batch",
                    "silent.attention_sees_future"}


def run(name: str, mode: str) -> tuple[list, list[str], float]:
    mod = corpus.load(name)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if mode == "watch":
                models, optimizers, train = mod.build()
                with torchtriage.watch(models, optimizers, on_anomaly="record", report=False) as s:
                    train()
            else:
                with Session(discover=True, on_anomaly="record", report=False) as s:
                    mod.build()[2]()
            findings = list(s.report)
        except Exception as e:  # a crash is the loudest false alarm: count it as one
            findings = [("crash", "error", f"{type(e).__name__}: {e}")]
    internal = [str(w.message) for w in caught if w.category.__name__ == "TriageInternalWarning"]
    return findings, internal, time.perf_counter() - t0


def family(code: str) -> str:
    """The check that makes a finding with this code."""
    if code in _DYNAMICS_SILENT:
        return "dynamics"
    prefix = code.split(".")[0]
    return {"gradient": "gradients", "gradients": "gradients", "silent": "silent", "numerical": "nonfinite",
            "dynamics": "dynamics", "data": "leakage", "repro": "repro", "crash": "crash"}.get(prefix, "triage")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print every finding with its loop")
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = []
    for name in corpus.LOOPS:
        needs = getattr(corpus.load(name), "NEEDS", ())
        try:
            for need in needs:
                __import__(need)
        except ImportError:
            print(f"skipped {name}: needs {', '.join(needs)}")
            continue
        names.append(name)
    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    loud_loops: set[tuple[str, str]] = set()
    internal_total, runs, seconds = 0, 0, 0.0
    details = []
    for name in names:
        for mode in ("watch", "discover"):
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                findings, internal, dt = run(name, mode)
            runs += 1
            seconds += dt
            internal_total += len(internal)
            for f in findings:
                code, sev, msg = (f if isinstance(f, tuple) else (f.code, f.severity.value, f.message))
                table[family(code)][sev] += 1
                table[family(code)]["codes:" + code + ":" + sev] += 1
                if sev != "info":
                    loud_loops.add((name, mode))
                details.append((name, mode, sev, code, msg))
    print(f"clean corpus: {len(names)} loops x 2 modes (watch, discover) = {runs} runs, "
          f"{seconds:.1f} s in all (shared machine; timing is noisy)")
    print(f"runs with an error or a warning: {len(loud_loops)}/{runs}; "
          f"TriageInternalWarning: {internal_total}")
    print()
    print(f"{'family':<12} {'errors':>7} {'warnings':>9} {'infos':>6}   codes")
    for fam in list(_CHECKS) + sorted(set(table) - set(_CHECKS)):
        c = table.get(fam, collections.Counter())
        codes = sorted((k.split(":", 2)[1:], v) for k, v in c.items() if k.startswith("codes:"))
        text = ", ".join(f"{code} ({sev}) x{v}" for (code, sev), v in codes) or "-"
        print(f"{fam:<12} {c['error']:>7} {c['warning']:>9} {c['info']:>6}   {text}")
    if args.list:
        print()
        for name, mode, sev, code, msg in details:
            print(f"{name:<40} {mode:<9} {sev:<8} {code}: {msg}")


if __name__ == "__main__":
    main()
