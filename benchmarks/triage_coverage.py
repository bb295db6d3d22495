"""How much of PyTorch's own error catalogue the exception triage classifies (issue 12).

Reads the table mined by `benchmarks/mine_torch_errors.py` (tests/data/torch_errors_<version>.tsv),
raises each template as the exception PyTorch would raise (its type, its text, `{}` filled
with a number) with no traceback and no operands, so only the message's words decide, runs
`torchtriage.triage_exception` on it, and prints:

  * coverage: per topic, the share that gets a specific category and code (not `other`);
  * agreement: the share whose category is the one the miner's topic names (size/shape →
    shape or data, dtype → dtype, device → device, layout → layout, gradient/in-place/optimizer
    → gradient). Topics are keyword labels, so this is a rough check that the category is
    plausible, not a hand-checked ground truth.

Then correctness (issue 27 §4): the real errors of `tests/data/triage_labelled.py`, each raised
by a real torch call and labelled by hand, are triaged with their tracebacks and operands;
printed per expected category as "correct: K/N (P %)", with every case classified wrong.

    python benchmarks/triage_coverage.py [TABLE]      (make bench-triage)
"""

from __future__ import annotations

import builtins
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
TOPICS = ("shape", "dtype", "device", "layout", "gradient", "inplace", "optimizer")
EXPECTED = {"shape": {"shape", "data"}, "dtype": {"dtype"}, "device": {"device"}, "layout": {"layout"},
            "gradient": {"gradient"}, "inplace": {"gradient"}, "optimizer": {"gradient"}}


def default_table() -> Path:
    return ROOT / "tests" / "data" / f"torch_errors_{torch.__version__.split('+')[0]}.tsv"


def load_table(path: Path) -> tuple[str, list[tuple[str, str, str, str]]]:
    """(torch version the table was mined from, rows of (topic, source, type, template))."""
    version = "?"
    rows: list[tuple[str, str, str, str]] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("# torch "):
                version = line.split()[2].rstrip(":")
                continue
            if line.startswith(("#", "topic\t")):
                continue
            topic, source, etype, template = line.rstrip("\n").split("\t")[:4]
            rows.append((topic, source, etype, template))
    return version, rows


def as_exception(etype: str, template: str) -> BaseException:
    """The exception PyTorch raises with this template (its own classes fall back on RuntimeError)."""
    cls = getattr(builtins, etype, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = RuntimeError
    return cls(template.replace("{}", "2"))


def classify_template(etype: str, template: str) -> tuple[str, str]:
    """(category, code) the triage gives this template."""
    from torchtriage import triage_exception

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = triage_exception(as_exception(etype, template)).primary
    assert f is not None
    return f.category.value, f.code


def coverage(rows: list[tuple[str, str, str, str]]) -> dict[str, dict[str, int]]:
    """Per topic: total, specific (a category other than `other`), agreeing (the topic's category)."""
    out: dict[str, dict[str, int]] = {t: Counter() for t in TOPICS}  # type: ignore[misc]
    for topic, _, etype, template in rows:
        if topic not in out:
            continue
        category, _ = classify_template(etype, template)
        out[topic]["total"] += 1
        out[topic]["specific"] += category != "other"
        out[topic]["agree"] += category in EXPECTED[topic]
    return out


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else default_table()
    version, rows = load_table(path)
    result = coverage(rows)
    total = sum(r["total"] for r in result.values())
    specific = sum(r["specific"] for r in result.values())
    agree = sum(r["agree"] for r in result.values())
    print(f"torch {version} error templates ({path.name}): {total} about the issue's topics")
    print(f"{'topic':<10} {'templates':>9} {'specific':>9} {'coverage':>9} {'agreement':>10}")
    for topic, r in result.items():
        n = max(r["total"], 1)
        print(f"{topic:<10} {r['total']:>9} {r['specific']:>9} {r['specific'] / n:>9.1%} {r['agree'] / n:>10.1%}")
    print(f"{'all':<10} {total:>9} {specific:>9} {specific / max(total, 1):>9.1%} {agree / max(total, 1):>10.1%}")
    print()
    correctness()
    return 0


def load_labelled() -> Any:
    """tests/data/triage_labelled.py, the hand-labelled corpus of real raised errors."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("triage_labelled", ROOT / "tests" / "data" / "triage_labelled.py")
    assert spec is not None and spec.loader is not None
    mod = sys.modules.setdefault("triage_labelled", importlib.util.module_from_spec(spec))
    spec.loader.exec_module(mod)
    return mod


def correctness() -> tuple[int, int]:
    """Print the share of the labelled real errors the triage classifies right; (correct, total)."""
    import tempfile

    labelled = load_labelled()
    with tempfile.TemporaryDirectory() as tmp:
        outcomes = labelled.run_all(tmp)
    per: dict[str, Counter[str]] = {}
    for o in outcomes:
        c = per.setdefault("|".join(sorted(o.case.categories)), Counter())
        c["total"] += 1
        c["correct"] += o.correct
    print(f"correctness on {len(outcomes)} real raised errors labelled by hand (tests/data/triage_labelled.py)")
    for category, c in sorted(per.items(), key=lambda kv: -kv[1]["total"]):
        print(f"  {category:<12} correct: {c['correct']}/{c['total']} ({c['correct'] / c['total']:.1%})")
    good = sum(o.correct for o in outcomes)
    print(f"  {'all':<12} correct: {good}/{len(outcomes)} ({good / max(len(outcomes), 1):.1%})")
    wrong = [o for o in outcomes if not o.correct]
    if wrong:
        print("wrong:")
    for o in wrong:
        print(f"  {o.case.id}: expected {o.case.category}/{o.case.code or '*'}, got {o.category or '-'}/{o.code or '-'}"
              f"  ({o.raised[:100] or 'did not raise'})")
    return good, len(outcomes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
