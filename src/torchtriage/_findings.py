"""The report model: `Report`, the findings of a run in priority order, and its display (text
in a terminal or a test failure, HTML in a notebook, rich's protocol). `Finding` and its kinds
live in `_finding.py` and are re-exported here.

A `Report` sorts findings by (informational last, category priority, execution order);
`primary` is the first finding that is not informational, or None. Renderers (`_render/`, public
as `torchtriage.report`) turn it into terminal text, JSON (a public, versioned contract: see
`SCHEMA`) and HTML; they read findings and never import this module at run time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ._catalogue import msg
from ._finding import CATEGORY_ORDER as CATEGORY_ORDER
from ._finding import SCHEMA as SCHEMA
from ._finding import Category as Category
from ._finding import Finding as Finding
from ._finding import Severity as Severity
from ._finding import Stage as Stage
from ._finding import from_catalogue as from_catalogue
from ._finding import jsonable
from ._render._text import render_text, rich_renderables


def _sort_key(f: Finding) -> tuple[int, int, int]:
    return (f.severity is Severity.INFO, CATEGORY_ORDER.index(f.category), f.order)


@dataclasses.dataclass(frozen=True)
class Report:
    """Findings in priority order. Empty when nothing is wrong; `primary` is never forced.

    Arguments:
        findings: any iterable of `Finding`; it is sorted on construction.
        meta: run facts (script, steps, exit status, torch version, ...).
        series: per-step measurements for plots, name -> list of numbers (e.g. "loss").
    """

    findings: tuple[Finding, ...] = ()
    meta: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    series: Mapping[str, list[float | None]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "findings", tuple(sorted(self.findings, key=_sort_key)))

    @property
    def primary(self) -> Finding | None:
        """The first finding to act on (not informational), or None."""
        for f in self.findings:
            if f.severity is not Severity.INFO:
                return f
        return None

    @property
    def ok(self) -> bool:
        """True when no finding is an error or a warning."""
        return self.primary is None

    def assert_ok(self) -> None:
        """Raise `AssertionError` with the rendered report when a finding is an error or a warning
        (in a test: `triage.assert_ok()` or `session.report.assert_ok()`)."""
        __tracebackhide__ = True
        if not self.ok:
            raise AssertionError(msg("pytest.not_ok") + "\n" + render_text(self))

    def __bool__(self) -> bool:
        return bool(self.findings)

    def __len__(self) -> int:
        return len(self.findings)

    def __iter__(self) -> Iterator[Finding]:
        return iter(self.findings)

    def filter(
        self,
        *,
        category: str | Category | None = None,
        code: str | None = None,
        severity: str | Severity | None = None,
    ) -> list[Finding]:
        """Findings matching all the given fields (strings or enums)."""
        out = []
        for f in self.findings:
            if category is not None and f.category.value != str(category):
                continue
            if code is not None and f.code != code:
                continue
            if severity is not None and f.severity.value != str(severity):
                continue
            out.append(f)
        return out

    def merged(self, other: Report | Iterable[Finding]) -> Report:
        extra = other.findings if isinstance(other, Report) else tuple(other)
        meta = dict(self.meta)
        series = dict(self.series)
        if isinstance(other, Report):
            meta.update(other.meta)
            series.update(other.series)
        return Report(self.findings + extra, meta=meta, series=series)

    def to_dict(self) -> dict[str, Any]:
        primary = self.primary
        return {
            "schema": SCHEMA,
            "primary": None if primary is None else self.findings.index(primary),
            "findings": [f.to_dict() for f in self.findings],
            "meta": jsonable(self.meta),
            "series": jsonable(self.series),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        schema = data.get("schema")
        if schema != SCHEMA:
            raise ValueError(f"report schema {schema!r} is not supported; expected {SCHEMA!r}")
        return cls(
            tuple(Finding.from_dict(d) for d in data.get("findings", [])),
            meta=dict(data.get("meta", {})),
            series=dict(data.get("series", {})),
        )

    def __str__(self) -> str:
        return render_text(self)

    # The text report, also as the repr: a failing `assert report.ok, report` in pytest, the
    # REPL and a notebook's plain-text fallback show the report, not the dataclass fields.
    __repr__ = __str__

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the HTML report as a fragment (scoped CSS, no script). The
        HTML template is loaded only when a notebook asks."""
        from ._render._fragment import render_fragment

        return render_fragment(self)

    def __rich_console__(self, console, options):  # type: ignore[no-untyped-def]
        yield from rich_renderables(self)
