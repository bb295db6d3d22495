"""How a data-ledger finding is made, shared by the verdicts, the group and the rank checks."""

from __future__ import annotations

from typing import Any

from .._finding import from_catalogue
from .._frames import UserFrame
from ._epochs import Loader


def finding(code: str, key: str, severity: str, frame: UserFrame | None, fields: dict[str, Any],
            evidence: dict[str, Any], cause: str = "") -> Any:
    return from_catalogue("data", f"data.{code}", f"ledger.{key}.message", fields=fields,
                          cause_key=f"ledger.{cause or key}.cause", next_key=f"ledger.{cause or key}.next",
                          frame=frame, evidence=evidence, severity=severity, stage="data", source_line=True)


def label(entry: Loader) -> str:
    return f"'{entry.name}'"
