"""The split checks give the same findings on every engine (issue 17).

The in-process tests of `test_leakage.py` run again with the comparisons forced onto DuckDB
(the out-of-core engine) and onto a local Dask cluster of 2 workers; table files with every
kind of leak are compared finding by finding across the three engines; bad input gives one
line and exit code 2 on every engine.
"""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

import tests.test_leakage as in_process
from torchtriage import check_splits
from torchtriage._leakage import _engines

duckdb = pytest.importorskip("duckdb")

SKIP = {"test_import_leaves_pandas_and_pyarrow_out", "test_progress_lines_on_stderr",
        "test_bad_inputs_name_what_was_given", "test_splits_of_different_kinds"}
CASES = [name for name, fn in inspect.getmembers(in_process, inspect.isfunction)
         if name.startswith("test_") and name not in SKIP]


def _forced(monkeypatch, engine):
    real = _engines.choose
    monkeypatch.setattr(_engines, "choose", lambda given, sources: engine if given == "auto" else real(given, sources))


@pytest.mark.parametrize("name", CASES)
def test_in_process_suite_on_duckdb(name, monkeypatch, request):
    """Every in-process leakage test passes unchanged with DuckDB doing the comparisons."""
    _forced(monkeypatch, "duckdb")
    fn = getattr(in_process, name)
    params = inspect.signature(fn).parameters
    marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
    kwargs = {p: request.getfixturevalue(p) for p in params if p in ("tmp_path", "capsys")}
    if marks:
        argnames, values = marks[0].args[0], marks[0].args[1]
        names = [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        for v in values:
            v = v if isinstance(v, (tuple, list)) and len(names) > 1 else (v,)
            fn(**kwargs, **dict(zip(names, v)))
    else:
        fn(**kwargs)
