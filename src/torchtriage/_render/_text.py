"""The terminal rendering: the primary finding first, with where, why, evidence and next check."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .._catalogue import msg
from .._finding import Finding, Severity

if TYPE_CHECKING:
    from .._findings import Report

_MARK = {Severity.ERROR: "✗", Severity.WARNING: "!", Severity.INFO: "i"}


def _where(f: Finding) -> list[str]:
    out = []
    for key, value in (
        ("report.step", f.step),
        ("report.stage", f.stage.value if f.stage else None),
        ("report.module", (f.module or msg("report.root_module")) if f.module is not None else None),
        ("report.op", f.op),
        ("report.parameter", f.parameter),
        ("report.rank", f.rank),
        ("report.host", f.host),
    ):
        if value is not None:
            out.append(f"{msg(key)}={value}")
    return out


def _short_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path  # outside the working directory: absolute


def _format_evidence(value: Any) -> str:
    # A tensor summary read back from JSON is a dict: print it as the live one prints.
    if isinstance(value, dict) and "shape" in value and "dtype" in value:
        from .._summary import TensorSummary

        fields = {k: value.get(k) for k in ("dtype", "device", "numel", "nan", "posinf", "neginf", "min", "max")}
        try:
            return str(TensorSummary(shape=tuple(value["shape"]), contiguous=value.get("contiguous") is not False,
                                     **{k: v for k, v in fields.items() if v is not None}))
        except (TypeError, ValueError):
            pass
    return str(value)


def render_finding(f: Finding, *, index: int | None = None) -> list[str]:
    head = f"{_MARK[f.severity]} [{f.category.value}] {f.message}"
    if index is not None:
        head = f"{index}. " + head
    lines = [head]
    where = _where(f)
    if where:
        lines.append(f"    {msg('report.where')}: " + "  ".join(where))
    if f.file:
        line = f"    {msg('report.line')}: {_short_path(f.file)}:{f.line}"
        src = f.evidence.get("source_line") if isinstance(f.evidence, dict) else None
        if not src and f.line:
            # Checks need not copy the line's text; read it where the file is (never raises).
            import linecache

            src = linecache.getline(f.file, f.line).strip()
        if src:
            line += f"    {src}"
        lines.append(line)
    if f.cause:
        lines.append(f"    {msg('report.cause')}: {f.cause}")
    ev = {k: v for k, v in f.evidence.items() if k != "source_line"}
    if ev:
        lines.append(f"    {msg('report.evidence')}:")
        for k, v in ev.items():
            lines.append(f"      {k}: {_format_evidence(v)}")
    if f.next_check:
        lines.append(f"    {msg('report.next')}: {f.next_check}")
    if f.count > 1:
        lines.append(f"    ({msg('report.count', count=f.count)})")
    return lines


def render_text(report: Report) -> str:
    """The report as plain text (no colour), stable for golden tests."""
    lines = [f"== {msg('report.title')} =="]
    from ._spark import trend_line

    if not report.findings:
        lines.append(msg("report.empty"))
        return "\n".join(lines)
    trend = trend_line(report.series, report.meta)  # one line: the loss curve beside the findings (issue 19)
    primary = report.primary
    issues = [f for f in report.findings if f.severity is not Severity.INFO]
    infos = [f for f in report.findings if f.severity is Severity.INFO]
    if primary is not None:
        lines.append(f"-- {msg('report.primary')} --")
        lines.extend(render_finding(primary))
    rest = [f for f in issues if f is not primary]
    if rest:
        lines.append(f"-- {msg('report.also')} --")
        for i, f in enumerate(rest, 1):
            lines.extend(render_finding(f, index=i))
    if infos:
        lines.append(f"-- {msg('report.infos')} --")
        for f in infos:
            lines.extend(render_finding(f))
    if trend:
        lines.append(trend)
    counts = {s: sum(1 for f in report.findings if f.severity is s) for s in Severity}
    lines.append(msg("report.summary_line", errors=counts[Severity.ERROR], warnings=counts[Severity.WARNING],
                     infos=counts[Severity.INFO], steps=report.meta.get("steps", 0)))
    return "\n".join(lines)


def rich_renderables(report: Report) -> Iterator[Any]:
    """For `rich.print(report)`: the same text, coloured by severity, without importing rich here."""
    from rich.text import Text

    style = {"✗": "bold red", "!": "yellow", "i": "cyan", "=": "bold", "-": "bold"}
    for line in render_text(report).splitlines():
        stripped = line.lstrip("0123456789. ")
        yield Text(line, style=style.get(stripped[:1], ""))
