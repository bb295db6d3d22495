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

    python benchmarks/triage_coverage.py [TABLE]      (make bench-triage)
"""

from __future__ import annotations

import builtins
import sys
import warnings
from collections import Counter
from pathlib import Path

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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
