"""The share of non-finite findings left "not reproduced" (issue 27).

Every single-process script of the project that makes a non-finite value (the examples, the
rerun zoo of tests/zoo/rerun/) runs under `torchtriage run --json`; each non-finite finding
(code `numerical.nonfinite_*`, warning or error) counts, and it is "not reproduced" when it
names no op and no line. With `--compare`, each script runs once more with `--no-rerun` (the
run's own localization only), for the before / after figures.

    python benchmarks/not_reproduced.py [--compare]
    python benchmarks/not_reproduced.py --suite [-n 2]

`--suite` measures the share over every non-finite test in the test suite instead: it runs the
whole test suite with a probe on PYTHONPATH (`_nf_probe/`, and `-p nf_probe`) that
records every non-finite warning or error any report holds, in the test process and in every
process a test starts (`torchtriage run`, torchrun ranks). A test's findings are counted once
each (the same finding read back from JSON is not counted twice).
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


def _not_reproduced_causes() -> set[str]:
    from torchtriage._catalogue import en_nonfinite, zh_nonfinite

    return {m.MESSAGES["nonfinite.cause.not_reproduced"] for m in (en_nonfinite, zh_nonfinite)}


NOT_REPRODUCED = _not_reproduced_causes()


def not_reproduced(f: dict) -> bool:
    """The finding says the replay did not reproduce the value (its cause is that sentence, in
    either language). A finding localized by nature (a batch that holds NaN, an update or a
    state that made a parameter non-finite) names its input or parameter, not an op: it counts
    as localized."""
    if "cause" in f:
        return f["cause"] in NOT_REPRODUCED
    message = f.get("message") or ""  # (a probe log written before the cause was kept)
    return "did not reproduce it" in message or "没有复现" in message


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


def suite(workers: int) -> None:
    files = ["tests"]  # the whole suite: any test may make a non-finite value
    log = os.path.join(tempfile.gettempdir(), "torchtriage_nf_suite.jsonl")  # kept for a look afterwards
    if os.path.exists(log):
        os.remove(log)
    env = dict(os.environ, TORCHTRIAGE_NF_LOG=log, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "benchmarks", "_nf_probe"), os.path.join(ROOT, "src")]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "nf_probe", *files]
    if workers > 1:
        cmd += ["-n", str(workers)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=False)
    took = time.monotonic() - t0
    tail = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else ["(no output)"]
    summarize(log, f"the test suite ({tail[0]}; {took:.0f} s)")


def summarize(log: str, ran: str) -> None:
    """Print the not-reproduced findings and the share from the probe's log."""
    rows = []
    if os.path.exists(log):
        with open(log, encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh]
    # One finding per (test, code, step, rank): a run builds its report more than once (the
    # "not reproduced" finding before the rerun replaces it, the rerun's child, the JSON read
    # back), and the finding counts as localized when any of its versions names an op or a line.
    seen: dict[tuple, dict] = {}
    for r in rows:
        key = (r["test"], r["code"], r["step"], r["rank"])
        if key not in seen or (not_reproduced(seen[key]) and not not_reproduced(r)):
            seen[key] = r
    per_test: dict[str, list[dict]] = {}
    for r in seen.values():
        per_test.setdefault(r["test"] or "(outside a test)", []).append(r)
    bad_total = 0
    for test, found in sorted(per_test.items()):
        bad = [f for f in found if not_reproduced(f)]
        bad_total += len(bad)
        if bad:
            print(f"not reproduced: {test}: " + "; ".join(f"{f['code']} step {f['step']}: {f['message']}" for f in bad))
    n = len(seen)
    share = bad_total / n if n else 0.0
    print(f"{ran}: {len(per_test)} tests with non-finite findings")
    print(f"suite: {bad_total} of {n} non-finite finding(s) not reproduced: {100 * share:.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", action="store_true", help="also run each script with --no-rerun")
    ap.add_argument("--suite", action="store_true", help="measure over every non-finite test of the test suite")
    ap.add_argument("-n", type=int, default=2, help="pytest workers for --suite (default 2)")
    ap.add_argument("--from-log", metavar="JSONL", help="summarize a probe log of an earlier --suite run")
    args = ap.parse_args()
    if args.from_log:
        summarize(args.from_log, args.from_log)
        return
    if args.suite:
        suite(args.n)
        return
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
