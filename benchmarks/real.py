"""Sensitivity and specificity on real code nobody here wrote (issue 24).

Every case is a program run as `torchtriage run --json OUT train.py` in a scratch copy:
- a bug (`bugs-*`, `corpora/bugs/`): DETECTED when a warning or error has an expected
  category; LOCATED when such a finding also names the place (its line, or a token of its
  module / op / parameter, or a cause token in its message). Its fixed twin (the case's own
  `fix.replace`) is run too: any warning or error there is a TWIN ALARM, except findings
  verified true of the twin (`fixed_ok`).
- a correct program (`clean-*`, `corpora/clean/`): any warning or error, or a non-zero exit,
  is a CLEAN ALARM.
The contract is the one of ../shared/realcases/score.py; this file applies it to both corpora.

Halves. `../shared/realcases/` is development code. Our own corpora are split by source
repository (`case.json` `source.repo`): a repository whose SHA-256 falls in the lowest 40 %
is sealed, the rest is development; `corpora/split_overrides.json` moves a repository to the
development half once its sealed figures were reported (issue 24). Adding cases never moves
an existing repository, so nothing tuned on can become sealed.

    python benchmarks/real.py                 # the development half (realcases + corpora dev)
    python benchmarks/real.py --sealed        # the sealed half: once per round, just before submitting
    python benchmarks/real.py --only num_,grad_ --set corpora-bugs
Per-case rows go to benchmarks/results_real_<half>.json; the last lines are the totals and
one row per family (the bug's category; the alarming finding's check family).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import datetime
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPORA = ROOT / "corpora"
REALCASES = ROOT.parent / "shared" / "realcases"
QUIET = {"info", "note", "debug", "hint"}
SEALED_SHARE = 40  # percent of repositories, by hash


def low(x: object) -> str:
    return str(x or "").lower()


def half_of(repo: str, overrides: dict[str, str] | None = None) -> str:
    """`sealed` or `dev` for a source repository: stable, independent of the other cases."""
    key = repo.strip().lower()
    if overrides and key in overrides:
        return overrides[key]
    return "sealed" if int(hashlib.sha256(key.encode()).hexdigest(), 16) % 100 < SEALED_SHARE else "dev"


def _overrides() -> dict[str, str]:
    path = CORPORA / "split_overrides.json"
    if not path.exists():
        return {}
    return {k.lower(): v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}


class Case:
    def __init__(self, set_name: str, path: Path, kind: str, expect: dict, fixes: list, repo: str,
                 category: str, launch: str = "python") -> None:
        self.set, self.path, self.kind, self.expect = set_name, path, kind, expect
        self.fixes, self.repo, self.category, self.launch = fixes, repo, category, launch

    @property
    def id(self) -> str:
        return self.path.name


def load_cases() -> list[tuple[Case, str]]:
    """Every case with its half: (case, 'dev' | 'sealed')."""
    cases: list[tuple[Case, str]] = []
    if REALCASES.is_dir():
        for name, expect_file in (("bugs-a", "expect-a.json"), ("bugs-b", "expect-b.json")):
            if not (REALCASES / name).is_dir():
                continue
            expect = json.loads((REALCASES / expect_file).read_text())
            for cid, exp in sorted(expect.items()):
                if cid.startswith("_") or exp.get("cpu_skip"):
                    continue
                meta = json.loads((REALCASES / name / cid / "case.json").read_text())
                fixes = [] if meta.get("gpu_only") else meta.get("fix", {}).get("replace", [])
                cases.append((Case(name, REALCASES / name / cid, "bug", exp, fixes, "realcases",
                                   meta.get("category", "?")), "dev"))
        for name in ("clean-a", "clean-b"):
            for d in sorted((REALCASES / name).glob("*/train.py")):
                cases.append((Case(name, d.parent, "clean", {}, [], "realcases", "clean"), "dev"))
        for d in sorted((REALCASES / "dist-a").glob("*/case.json")):
            exp = json.loads(d.read_text())["expect"]
            kind = "clean" if exp.get("clean") else "dist"
            cases.append((Case("dist-a", d.parent, kind, exp, [], "realcases", "distributed", "torchrun2"), "dev"))
    overrides = _overrides()
    for kind, sub in (("bug", "bugs"), ("clean", "clean")):
        for meta_path in sorted((CORPORA / sub).glob("*/case.json")):
            meta = json.loads(meta_path.read_text())
            repo = meta["source"]["repo"]
            fixes = meta.get("fix", {}).get("replace", []) if kind == "bug" else []
            case = Case(f"corpora-{sub}", meta_path.parent, kind, meta.get("expect", {}), fixes, repo,
                        meta.get("category", "clean"), meta.get("launch", "python"))
            cases.append((case, half_of(repo, overrides)))
    return cases


def _run(cmd: list[str], cwd: Path, timeout: float) -> tuple[object, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "default", "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return "timeout", out


def run_case(case: Case, fixed: bool) -> tuple[dict | None, object, float]:
    work = Path(tempfile.mkdtemp(prefix="tt-real-"))
    try:
        shutil.copytree(case.path, work / "c")
        if fixed:
            script = work / "c" / "train.py"
            src = script.read_text()
            for old, new in case.fixes:
                src = src.replace(old, new)
            script.write_text(src)
        out = work / "report.json"
        tt = [sys.executable, "-m", "torchtriage"]
        if case.launch == "torchrun2" or case.set.startswith("dist"):
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m",
                   "torchtriage", "run", "--json", str(out), "--stall-timeout", "20", "train.py"]
            timeout = 150.0
        else:
            cmd, timeout = [*tt, "run", "--json", str(out), "train.py"], 240.0
        t0 = time.perf_counter()
        rc, _ = _run(cmd, work / "c", timeout)
        report = None
        if out.exists():
            try:
                report = json.loads(out.read_text())
            except ValueError:
                pass
        return report, rc, time.perf_counter() - t0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def alarms(report: dict | None) -> list[dict]:
    return [f for f in (report or {}).get("findings", []) if low(f.get("severity")) not in QUIET]


def matches(f: dict, exp: dict) -> tuple[bool, bool]:
    """(detected, located) of one finding against a bug's expectation."""
    if not any(c in low(f.get("category")) for c in exp.get("categories", [])):
        return False, False
    line_ok = f.get("line") in exp.get("lines", []) and low(f.get("file")).endswith("train.py")
    text = low(f.get("message")) + " " + low(f.get("cause"))
    tokens = any(t.lower() in low(f.get(field)) for key, field in
                 (("module", "module"), ("op", "op"), ("parameter", "parameter")) for t in exp.get(key, []))
    msg_ok = any(t.lower() in text for t in exp.get("message", []))
    return True, bool(line_ok or tokens or msg_ok)


def matches_dist(f: dict, e: dict) -> tuple[bool, bool]:
    """A distributed case's contract (../shared/realcases/score.py): category, line and rank together."""
    text = low(f.get("message")) + " " + low(f.get("cause")) + " " + low(json.dumps(f.get("evidence")))
    det = any(k in low(f.get("category")) or k in low(f.get("code")) for k in e.get("categories", []))
    loc = (det and (f.get("line") in e.get("lines", []) or any(f"train.py:{x}" in text for x in e.get("lines", [])))
           and (not e.get("parameter") or any(t in low(f.get("parameter")) or t in text for t in e["parameter"]))
           and all(t in text for t in e.get("message", []))
           and (not e.get("op") or any(t in low(f.get("op")) for t in e["op"]))
           and ("rank" not in e or f.get("rank") == e["rank"]))
    return det, bool(loc)


def family(f: dict) -> str:
    """The check family of a finding: its code's prefix (`silent.loss_broadcast` → `silent`)."""
    return low(f.get("code")).split(".")[0] or low(f.get("category"))


def _brief(f: dict) -> list:
    return [f.get("category"), f.get("code"), f.get("line"), (f.get("message") or "")[:100]]


def score(case: Case) -> dict:
    report, rc, secs = run_case(case, fixed=False)
    row: dict = {"set": case.set, "case": case.id, "repo": case.repo, "kind": case.kind,
                 "category": case.category, "rc": rc, "secs": round(secs, 1)}
    if case.kind == "clean":
        al = alarms(report)
        row["alarm"] = rc != 0 or report is None or bool(al)
        row["findings"] = [_brief(f) for f in al][:4]
        row["families"] = sorted({family(f) for f in al}) or (["crash"] if row["alarm"] else [])
        return row
    det = loc = False
    for f in alarms(report):
        d, l_ = matches_dist(f, case.expect) if case.kind == "dist" else matches(f, case.expect)
        det, loc = det or d, loc or l_
    if case.kind == "dist" and case.expect.get("must_end_itself") and rc == "timeout":
        det = loc = False
    row.update(detected=det, located=loc, findings=[_brief(f) for f in alarms(report)][:4])
    if case.fixes:
        twin, _, _ = run_case(case, fixed=True)
        ok = [t.lower() for t in case.expect.get("fixed_ok", [])]
        fal = [f for f in alarms(twin) if not any(t in low(f.get("message")) + " " + low(f.get("cause")) for t in ok)]
        row["twin_alarm"] = bool(fal)
        row["twin_findings"] = [_brief(f) for f in fal][:3]
        row["twin_families"] = sorted({family(f) for f in fal})
    return row


def summarize(rows: list[dict]) -> list[str]:
    bugs = [r for r in rows if r["kind"] in ("bug", "dist")]
    twins = [r for r in bugs if "twin_alarm" in r]
    clean = [r for r in rows if r["kind"] == "clean"]

    def pct(k: int, n: int) -> str:
        return f"{k}/{n} ({100 * k / n:.0f} %)" if n else "0/0"

    lines = [f"bugs: detected {pct(sum(r['detected'] for r in bugs), len(bugs))}, "
             f"located {pct(sum(r['located'] for r in bugs), len(bugs))}; "
             f"twin alarms {pct(sum(r['twin_alarm'] for r in twins), len(twins))}; "
             f"clean alarms {pct(sum(r['alarm'] for r in clean), len(clean))}"]
    by_cat: dict[str, list[dict]] = collections.defaultdict(list)
    for r in bugs:
        by_cat[r["category"]].append(r)
    lines.append("  bug category        cases  detected  located")
    for cat, rs in sorted(by_cat.items()):
        lines.append(f"  {cat:18s} {len(rs):6d} {sum(r['detected'] for r in rs):9d} {sum(r['located'] for r in rs):8d}")
    fams: collections.Counter[str] = collections.Counter()
    for r in twins:
        fams.update(("twin", f) for f in r.get("twin_families", []))
    for r in clean:
        fams.update(("clean", f) for f in r.get("families", []))
    if fams:
        lines.append("  alarms by check family (programs that alarmed): " +
                     ", ".join(f"{kind} {fam}={n}" for (kind, fam), n in sorted(fams.items())))
    else:
        lines.append("  alarms by check family: none")
    return lines


def _print_row(r: dict) -> None:
    if r["kind"] == "clean":
        tag = f"alarm={'Y' if r['alarm'] else '-'}"
    else:
        tag = (f"det={'Y' if r['detected'] else '-'} loc={'Y' if r['located'] else '-'} "
               f"twin={'Y' if r.get('twin_alarm') else '-'}")
    print(f"{r['set']:14s} {r['case']:52s} rc={r['rc']!s:>7} {tag} {r['findings'][:2]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sealed", action="store_true", help="run the sealed half (once per round, before submitting)")
    ap.add_argument("--set", default="", help="comma-separated sets: bugs-a, bugs-b, clean-a, clean-b, "
                                              "dist-a, corpora-bugs, corpora-clean")
    ap.add_argument("--only", default="", help="comma-separated case-id prefixes")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="cases run at once (default 2)")
    ap.add_argument("--out", default="", help="per-case rows (default benchmarks/results_real_<half>.json)")
    ap.add_argument("--list", action="store_true", help="list the cases and their halves, run nothing")
    a = ap.parse_args(argv)
    half = "sealed" if a.sealed else "dev"
    sets = [s for s in a.set.split(",") if s]
    prefixes = [p for p in a.only.split(",") if p]
    chosen = [c for c, h in load_cases() if h == half and (not sets or c.set in sets)
              and (not prefixes or any(c.id.startswith(p) for p in prefixes))]
    if a.list:
        for c in chosen:
            print(f"{half:6s} {c.set:14s} {c.repo:40s} {c.id}")
        return 0
    if not chosen:
        print(f"real: no case in the {half} half matches", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows: list[dict] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for row in pool.map(score, chosen):
            rows.append(row)
            _print_row(row)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    out = Path(a.out) if a.out else ROOT / "benchmarks" / f"results_real_{half}.json"
    out.write_text(json.dumps({"half": half, "commit": commit, "date": datetime.date.today().isoformat(),
                               "rows": rows}, indent=1) + "\n")
    print(f"== {half} half: {len(rows)} programs, {time.perf_counter() - t0:.0f} s, commit {commit} ==")
    for line in summarize(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
