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


def _miner():
    spec = importlib.util.spec_from_file_location("_tt_mine_torch_errors", ROOT / "benchmarks" / "mine_torch_errors.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _stored(path):
    """(topic, source, type, template) -> (category, code) as the table recorded them when mined."""
    out = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.startswith(("#", "topic\t")):
                cells = line.rstrip("\n").split("\t")
                out[tuple(cells[:4])] = (cells[4], cells[5])
    return out


def test_the_miner_reproduces_the_table_from_the_installed_torch(table):
    # The table is the miner's output, not a hand-made list: mining one shared library (ELF
    # .rodata) and one Python source of the installed torch gives exactly the table's rows of
    # that source (a text seen first in an earlier file is filed under that file).
    import torch

    bench, version, rows = table
    if torch.__version__ != version:
        pytest.skip(f"the table comes from torch {version}, this is {torch.__version__}")
    miner = _miner()
    templates = {r[3] for r in rows}
    lib = miner.TORCH / "lib" / "libc10.so"
    if not lib.exists():
        pytest.skip("no libc10.so (not an ELF build)")
    mined = {t.strip() for t in miner.library_strings(lib)}
    mined = {t for t in mined if miner.is_message(t) and miner.topic_of(t) != "other"}
    filed = {r[3] for r in rows if r[1] == "lib/libc10.so"}
    assert filed and filed <= mined and mined <= templates
    src = miner.TORCH / "optim" / "optimizer.py"
    mined_py = {(e, t.strip()) for e, t in miner.python_messages(src)
                if miner.is_message(t.strip()) and miner.topic_of(t.strip()) != "other"}
    filed_py = {(r[2], r[3]) for r in rows if r[1] == "optim/optimizer.py"}
    assert filed_py and filed_py <= mined_py and {t for _, t in mined_py} <= templates
    assert ("ValueError", "optimizer got an empty parameter list") in mined_py


def test_nothing_the_table_recorded_as_classified_reads_worse_now(table):
    # The category/code columns are the triage's reading when the table was mined: a template
    # that had a specific code then must not fall back to `other` now.
    bench, _, _ = table
    worse = [(key[3], was) for key, was in _stored(TABLES[-1]).items()
             if was[0] != "other" and bench.classify_template(key[2], key[3])[0] == "other"]
    assert worse == []
