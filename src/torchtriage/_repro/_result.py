"""What a replay found, against what the bundle recorded: the trigger's signature, the match
rule and the `ReplayResult` that every way to replay (objects, factory, script) returns.

  * a finding trigger reproduces when a finding has the same category, code, module, op;
  * an exception trigger reproduces when the replay raises the same exception type.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._catalogue import msg
from .._findings import Finding, Report
from ._bundle import Bundle


@dataclasses.dataclass(frozen=True)
class ReplayResult:
    """The outcome of one replay.

    Attributes:
        reproduced: True when the bundle's trigger came back.
        expected: the trigger's signature (kind, category, code, module, op / exception type).
        matched: the finding that matched (finding triggers), else None.
        exception: "Type: message" when the replayed step raised, else None.
        report: everything the replay's session found.
        notes: what the replay could not take from the bundle (state left out, no loss, ...).
    """

    reproduced: bool
    expected: dict[str, Any]
    matched: Finding | None
    exception: str | None
    report: Report
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        """One paragraph: expected, observed, verdict (the message tests show on failure)."""
        what = describe_signature(self.expected)
        if self.reproduced:
            head = msg("repro.replay.yes", what=what)
        else:
            seen = [f"{f.code} @ {f.module or '<root>'}" for f in self.report.findings] or ["-"]
            head = msg("repro.replay.no", what=what, seen=", ".join(seen), exc=self.exception or "-")
        return "\n".join([head, *self.notes])


def describe_signature(sig: dict[str, Any]) -> str:
    if sig.get("kind") == "exception":
        return f"{sig.get('type')}: {str(sig.get('message', ''))[:200]}"
    return f"{sig.get('category')}/{sig.get('code')} module={sig.get('module')!r} op={sig.get('op')!r}"


def signature(bundle: Bundle) -> dict[str, Any]:
    t = bundle.trigger
    if t.get("kind") == "exception":
        return {"kind": "exception", "type": t.get("type"), "message": t.get("message")}
    return {"kind": "finding", **{k: t.get(k) for k in ("category", "code", "module", "op")}}


def matches(sig: dict[str, Any], report: Report, exc: BaseException | None) -> Finding | None | bool:
    if sig.get("kind") == "exception":
        return exc is not None and type(exc).__name__ == sig.get("type")
    for f in report.findings:
        if (f.category.value, f.code, f.module, f.op) == (sig.get("category"), sig.get("code"),
                                                         sig.get("module"), sig.get("op")):
            return f
    return None


def make_result(bundle: Bundle, report: Report, exc: BaseException | None, notes: list[str]) -> ReplayResult:
    sig = signature(bundle)
    m = matches(sig, report, exc)
    return ReplayResult(
        reproduced=bool(m), expected=sig, matched=m if isinstance(m, Finding) else None,
        exception=None if exc is None else f"{type(exc).__name__}: {str(exc)[:500]}",
        report=report, notes=tuple(notes))
