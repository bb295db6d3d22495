"""Records every non-finite finding a process builds into a report (benchmarks/not_reproduced.py
--suite). Loaded by Python at start-up because the benchmark puts this folder first on
PYTHONPATH for the test run and every process it starts; it does nothing unless
TORCHTRIAGE_NF_LOG names a file. It waits until torchtriage's report model is imported (no torch
import for processes that never use torchtriage), then wraps `Report.__post_init__` to append one
JSON line per non-finite warning or error, with the test that was running. In a pytest
process, torchtriage's pytest plugin is imported by pytest's assertion-rewriting importer, which
bypasses this finder: `nf_probe.py` (loaded with `-p nf_probe`) patches there instead."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys

_LOG = os.environ.get("TORCHTRIAGE_NF_LOG")
_TARGET = "torchtriage._findings"


def _patch(module) -> None:
    report = module.Report
    if getattr(report.__post_init__, "_nf_probe", False):
        return
    original = report.__post_init__

    def __post_init__(self) -> None:
        original(self)
        try:
            rows = []
            for f in self.findings:
                if f.code.startswith("numerical.nonfinite_") and f.severity.value in ("warning", "error"):
                    rows.append({"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" (")[0],
                                 "pid": os.getpid(), "code": f.code, "step": f.step, "op": f.op,
                                 "file": os.path.basename(f.file) if f.file else None, "line": f.line,
                                 "rank": f.rank, "message": f.message, "cause": f.cause,
                                 "localized_by": (f.evidence or {}).get("localized_by")})
            if rows:
                with open(_LOG, "a", encoding="utf-8") as fh:
                    fh.writelines(json.dumps(r, default=str) + "\n" for r in rows)
        except Exception:  # the probe never breaks a test
            pass

    __post_init__._nf_probe = True  # type: ignore[attr-defined]
    report.__post_init__ = __post_init__


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch
        return spec


if _LOG:
    sys.meta_path.insert(0, _Finder())
