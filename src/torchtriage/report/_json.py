"""The JSON rendering: a public, versioned contract (schema "torchtriage.report/1").

    {"schema": "torchtriage.report/1",
     "primary": 0 | null,
     "findings": [{"category", "code", "severity", "stage", "step", "module", "op",
                   "parameter", "file", "line", "message", "cause", "next_check",
                   "evidence", "count"}, ...],
     "meta": {...}, "series": {"loss": [...], ...}}

Fields are only ever added under the same schema version; renaming or removing one bumps it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .._findings import Report


def render_json(report: Report, *, indent: int | None = 2) -> str:
    return json.dumps(report.to_dict(), indent=indent, ensure_ascii=False, default=str)


def dump_json(report: Report, path: str | os.PathLike[str]) -> None:
    """Write the report to `path` as `> path` would: atomically for a regular file (a partial
    file never replaces a good one), in place for a FIFO or device, `-` for stdout; raises
    `OSError` (`torchtriage._outputs.OutputError`) with a one-line message."""
    from .._outputs import write_output

    write_output(os.fspath(path), render_json(report) + "\n", "dump_json")


def load_json(path: str | os.PathLike[str]) -> Report:
    with open(path, encoding="utf-8") as fh:
        data: Any = json.load(fh)
    return Report.from_dict(data)
