"""PyTorch's own error catalogue through the triage (issue 12 §2).

tests/data/torch_errors_<version>.tsv holds the error-message templates mined from the
installed torch by benchmarks/mine_torch_errors.py (check messages of its shared libraries and
raise/_check messages of its Python sources). Each template is raised as the exception PyTorch
would raise, with no traceback: only the message's words decide. Of those about size/shape,
dtype, device, layout, gradients, in-place changes and the optimizer, at least 90 % must get
a specific category and code. benchmarks/triage_coverage.py prints the same figures.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLES = sorted((ROOT / "tests" / "data").glob("torch_errors_*.tsv"))


def _bench():
    spec = importlib.util.spec_from_file_location("_tt_triage_coverage", ROOT / "benchmarks" / "triage_coverage.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def table():
    bench = _bench()
    assert TABLES, "no mined table in tests/data"
    version, rows = bench.load_table(TABLES[-1])
    return bench, version, rows


def test_the_table_says_which_torch_it_came_from_and_covers_every_topic(table):
    bench, version, rows = table
    assert TABLES[-1].name == f"torch_errors_{version.split('+')[0]}.tsv"
    topics = {r[0] for r in rows}
    assert topics == set(bench.TOPICS)
    assert len(rows) > 2000  # thousands of messages, not a hand-picked list


def test_at_least_90_percent_of_the_topic_templates_get_a_specific_code(table):
    bench, _, rows = table
    result = bench.coverage(rows)
    total = sum(r["total"] for r in result.values())
    specific = sum(r["specific"] for r in result.values())
    assert specific / total >= 0.90, {t: dict(r) for t, r in result.items()}
    for topic, r in result.items():  # no topic is carried by the others
        assert r["specific"] / r["total"] >= 0.85, (topic, dict(r))


def test_a_message_without_any_fault_vocabulary_stays_other(table):
    bench, _, _ = table
    assert bench.classify_template("RuntimeError", "the quick brown fox jumps over the lazy dog") == \
        ("other", "other.exception")
    assert bench.classify_template("KeyError", "Expected all tensors to have the same size") == \
        ("other", "other.exception")
