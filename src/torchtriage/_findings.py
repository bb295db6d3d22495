"""The report model: `Finding` and `Report`, the one currency every check returns.

A `Finding` is plain frozen data. Renderers (`torchtriage.report`) turn a `Report` into
terminal text, JSON (a public, versioned contract: see `SCHEMA`) and HTML.

Priority (the seed's order, cheapest and widest check first):
    shape → dtype → device → layout → numerical → gradient → silent → data → distributed
    → memory → environment → other
A `Report` sorts findings by (informational last, category priority, execution order);
`primary` is the first finding that is not informational, or None.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ._catalogue import msg

SCHEMA = "torchtriage.report/1"


class Category(str, enum.Enum):
    """What kind of fault a finding describes, in the order to check them."""

    SHAPE = "shape"
    DTYPE = "dtype"
    DEVICE = "device"
    LAYOUT = "layout"
    NUMERICAL = "numerical"
    GRADIENT = "gradient"
    SILENT = "silent"
    DATA = "data"
    DISTRIBUTED = "distributed"
    MEMORY = "memory"
    ENVIRONMENT = "environment"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


CATEGORY_ORDER: tuple[Category, ...] = tuple(Category)


class Stage(str, enum.Enum):
    """Where in a training step a finding sits."""

    DATA = "data"
    FORWARD = "forward"
    LOSS = "loss"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"
    PARAMETER = "parameter"

    def __str__(self) -> str:
        return self.value


class Severity(str, enum.Enum):
    """`error`: the run is wrong; `warning`: very likely wrong; `info`: intentional or a hint."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    def __str__(self) -> str:
        return self.value


def _coerce(enum_cls: type[enum.Enum], value: Any, field: str) -> Any:
    if value is None or isinstance(value, enum_cls):
        return value
    try:
        return enum_cls(value)
    except ValueError:
        accepted = ", ".join(repr(m.value) for m in enum_cls)
        raise ValueError(f"Finding.{field}={value!r} is not valid; accepted: {accepted}") from None


def _jsonable(value: Any) -> Any:
    """Evidence values as JSON: summaries via to_dict, tuples as lists, torch dtypes as str."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return value
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


@dataclasses.dataclass(frozen=True)
class Finding:
    """One diagnosed fault, with where it sits and the evidence a user can verify.

    Arguments:
        category: a `Category` (or its string value).
        code: a stable machine id such as ``"numerical.forward_producer"``.
        message: one-line diagnosis: what was observed, where.
        severity: ``"error"``, ``"warning"`` or ``"info"``.
        stage: data, forward, loss, backward, optimizer or parameter; None when unknown.
        step: the training step (optimizer steps completed before it), None outside a loop.
        module: the module path as ``model.named_modules()`` names it ("" is the root).
        op: the operation (an aten op, a function, a module class).
        parameter: a parameter name, for parameter-level findings.
        file, line: the user's own source line (first user frame, innermost).
        cause: the likely cause.
        next_check: what to check or change next.
        evidence: name -> value (tensor summaries, numbers, strings, lists).
        order: execution order within a session; ties are broken by it.
        count: how many times the same finding was seen (it is reported once).
        rank, local_rank, host: the process that made it, in a distributed run (issue 15);
            None in a single process (and then absent from the JSON).
    """

    category: Category
    code: str
    message: str
    severity: Severity = Severity.ERROR
    stage: Stage | None = None
    step: int | None = None
    module: str | None = None
    op: str | None = None
    parameter: str | None = None
    file: str | None = None
    line: int | None = None
    cause: str = ""
    next_check: str = ""
    evidence: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    order: int = 0
    count: int = 1
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "category", _coerce(Category, self.category, "category"))
        object.__setattr__(self, "severity", _coerce(Severity, self.severity, "severity"))
        object.__setattr__(self, "stage", _coerce(Stage, self.stage, "stage"))

    @property
    def key(self) -> tuple[Any, ...]:
        """Identity used to report a cause once: same code at the same place."""
        return (self.code, self.module, self.op, self.parameter, self.file, self.line)

    def replace(self, **changes: Any) -> Finding:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "category": self.category.value,
            "code": self.code,
            "severity": self.severity.value,
            "stage": self.stage.value if self.stage is not None else None,
            "step": self.step,
            "module": self.module,
            "op": self.op,
            "parameter": self.parameter,
            "file": self.file,
            "line": self.line,
            "message": self.message,
            "cause": self.cause,
            "next_check": self.next_check,
            "evidence": _jsonable(self.evidence),
            "count": self.count,
        }
        # Optional keys of schema torchtriage.report/1 (issue 15): only in distributed runs.
        for key in ("rank", "local_rank", "host"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})


def from_catalogue(category: Category | str, code: str, message_key: str, *,
                   fields: Mapping[str, Any] | None = None, cause_key: str = "", next_key: str = "",
                   frame: Any = None, evidence: Mapping[str, Any] | None = None, source_line: bool = False,
                   **attrs: Any) -> Finding:
    """The one way checks build a `Finding`.

    The message, cause and next check are the catalogue's `message_key`, `cause_key` and
    `next_key` filled with `fields` (an empty key: no text; a cause or next check rendered
    elsewhere, such as an op family's explanation, comes as `cause=` / `next_check=` text).
    `frame` (a `UserFrame`, or None) gives the file and line and, with `source_line`, the
    evidence's "source_line" (kept when the evidence has one). `attrs`: the other fields
    (severity, stage, step, module, op, parameter, ...)."""
    fields = fields or {}
    ev = dict(evidence or {})
    if source_line and frame is not None and frame.source:
        ev.setdefault("source_line", frame.source)
    if cause_key:
        attrs["cause"] = msg(cause_key, **fields)
    if next_key:
        attrs["next_check"] = msg(next_key, **fields)
    return Finding(category=_coerce(Category, category, "category"), code=code, message=msg(message_key, **fields),
                   file=frame.file if frame is not None else None, line=frame.line if frame is not None else None,
                   evidence=ev, **attrs)


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
            from .report._text import render_text

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
            "meta": _jsonable(self.meta),
            "series": _jsonable(self.series),
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
        from .report._text import render_text

        return render_text(self)

    # The text report, also as the repr: a failing `assert report.ok, report` in pytest, the
    # REPL and a notebook's plain-text fallback show the report, not the dataclass fields.
    __repr__ = __str__

    def _repr_html_(self) -> str:
        """Jupyter's rich display: the HTML report as a fragment (scoped CSS, no script)."""
        from .report._fragment import render_fragment

        return render_fragment(self)

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        from .report._text import rich_renderables

        yield from rich_renderables(self)
