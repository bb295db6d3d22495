"""The share of non-finite findings left "not reproduced" (issue 27).

Every single-process script of the project that makes a non-finite value (the examples, the
rerun zoo of tests/zoo/rerun/) runs under `torchtriage run --json`; each non-finite finding
(code `numerical.nonfinite_*`, warning or error) counts, and it is "not reproduced" when it
names no op and no line. With `--compare`, each script runs once more with `--no-rerun` (the
run's own localization only), for the before / after figures.

    python benchmarks/not_reproduced.py [--compare]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCRIPTS = [
    "examples/nan_in_forward.py",
    "examples/nan_backward_only.py",
    "examples/fp16_overflow.py",
    "examples/lr_explodes.py",
    "tests/zoo/rerun/rare_batch_crash.py",
    "tests/zoo/rerun/replay_buffer.py",
    "tests/zoo/rerun/distributions_next_step.py",
    "tests/zoo/rerun/script_target.py",
]


def nonfinite(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["code"].startswith("numerical.nonfinite_")
            and f["severity"] in ("warning", "error")]


def not_reproduced(f: dict) -> bool:
    return f.get("op") is None and f.get("file") is None


def run(script: str, *opts: str) -> tuple[list[dict], float]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "torchtriage", "run", "--json", out, *opts, os.path.join(ROOT, script)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp, env=env, timeout=900, check=False)
        took = time.monotonic() - t0
        with open(out, encoding="utf-8") as fh:
            return nonfinite(json.load(fh)), took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", action="store_true", help="also run each script with --no-rerun")
    args = ap.parse_args()
    modes = [("rerun", ())] + ([("no rerun", ("--no-rerun",))] if args.compare else [])
    totals = {name: [0, 0] for name, _ in modes}
    for script in SCRIPTS:
        cells = []
        for name, opts in modes:
            found, took = run(script, *opts)
            bad = sum(not_reproduced(f) for f in found)
            totals[name][0] += bad
            totals[name][1] += len(found)
            how = ",".join(sorted({str(f["evidence"].get("localized_by", "-")) for f in found})) or "-"
            cells.append(f"{name}: {bad}/{len(found)} not reproduced ({how}; {took:.0f} s)")
        print(f"{script:48s} " + " | ".join(cells))
    for name, (bad, n) in totals.items():
        share = bad / n if n else 0.0
        print(f"{name}: {bad} of {n} non-finite finding(s) not reproduced: {100 * share:.1f} %")


if __name__ == "__main__":
    main()
