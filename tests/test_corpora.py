"""Our own corpora of real code (corpora/, issue 24) stay well formed: every case names its
source, its fix applies exactly, its scoring contract can be met; the development / sealed
split is by repository and stable. The programs themselves run in `make bench-real`."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from torchtriage import Category

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bench_real", ROOT / "benchmarks" / "real.py")
assert _spec and _spec.loader
real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(real)

CATEGORIES = {"shape", "dtype", "device", "layout", "numerical", "gradient", "silent", "data", "dynamics",
              "distributed", "memory", "environment", "other"}
FINDING_CATEGORIES = {c.value for c in Category}
BUGS = sorted(p.parent for p in (ROOT / "corpora" / "bugs").glob("*/case.json"))
CLEAN = sorted(p.parent for p in (ROOT / "corpora" / "clean").glob("*/case.json"))
HEADER = re.compile(r"^#.*(Source: [\w.-]+/[\w.-]+|Report: https?://\S+)", re.M)


def _meta(case: Path) -> dict:
    return json.loads((case / "case.json").read_text())


def test_split_is_by_repository_stable_and_about_forty_percent():
    names = [f"owner{i}/repo{i}" for i in range(2000)]
    halves = [real.half_of(n) for n in names]
    assert set(halves) == {"dev", "sealed"}
    assert 0.37 < halves.count("sealed") / len(names) < 0.43
    assert real.half_of("Owner7/Repo7") == real.half_of("owner7/repo7") == halves[7]
    flipped = "dev" if halves[7] == "sealed" else "sealed"
    assert real.half_of("owner7/repo7", {"owner7/repo7": flipped}) == flipped


def test_realcases_are_development_only():
    assert all(half == "dev" for case, half in real.load_cases() if case.repo == "realcases")


def test_the_scoring_contract_reads_a_report_as_score_py_does():
    exp = {"categories": ["gradient"], "lines": [54], "parameter": ["0.weight"], "message": ["not in any optimizer"]}
    at_line = {"category": "gradient", "line": 54, "file": "/tmp/x/train.py", "severity": "error"}
    by_param = {"category": "gradient", "line": 3, "file": "train.py", "parameter": "net.0.weight"}
    elsewhere = {"category": "gradient", "line": 3, "file": "train.py", "message": "a frozen layer"}
    other_kind = {"category": "silent", "line": 54, "file": "train.py"}
    assert real.matches(at_line, exp) == (True, True)
    assert real.matches(by_param, exp) == (True, True)
    assert real.matches(elsewhere, exp) == (True, False)
    assert real.matches(other_kind, exp) == (False, False)
    assert real.alarms({"findings": [at_line, {**at_line, "severity": "info"}]}) == [at_line]
    assert real.family({"code": "silent.loss_broadcast", "category": "silent"}) == "silent"


@pytest.mark.parametrize("case", BUGS + CLEAN, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_case_names_its_source(case):
    meta = _meta(case)
    src = (case / "train.py").read_text()
    assert HEADER.search(src.split("\nimport", 1)[0] + "\n"), "train.py must open with its Source / Report"
    assert meta["id"] == case.name
    repo = meta["source"]["repo"]
    assert re.fullmatch(r"[\w.-]+/[\w.-]+|so:\d+|forum:[\w-]+", repo), repo
    assert meta["source"].get("report") or meta["source"].get("commit")
    if meta["source"].get("commit"):
        assert re.fullmatch(r"[0-9a-f]{40}", meta["source"]["commit"]), meta["source"]["commit"]
    assert re.search(r"""__name__ == ["']__main__["']""", src), "a script runs as `python train.py`"


@pytest.mark.parametrize("case", BUGS, ids=lambda p: p.name)
def test_bug_has_an_exact_fix_and_a_contract(case):
    meta = _meta(case)
    src = (case / "train.py").read_text()
    assert meta["category"] in CATEGORIES
    replace = meta["fix"]["replace"]
    assert replace, "a bug needs its fixed twin"
    for old, new in replace:
        assert src.count(old) == 1, f"fix text occurs {src.count(old)} times: {old[:60]!r}"
        assert old != new
    exp = meta["expect"]
    assert set(exp["categories"]) & FINDING_CATEGORIES, "no category a finding can have"
    n_lines = src.count("\n") + 1
    assert all(1 <= ln <= n_lines for ln in exp.get("lines", []))
    assert any(exp.get(k) for k in ("lines", "module", "op", "parameter", "message")), "nothing to locate by"


@pytest.mark.parametrize("case", CLEAN, ids=lambda p: p.name)
def test_clean_program_says_why_it_looks_suspicious(case):
    meta = _meta(case)
    assert meta.get("expected", "clean") == "clean"
    assert meta["what_looks_suspicious"] and meta["progress_metric"]
