"""One finding: `Finding`, the one currency every check returns, and its kinds (`Category`,
`Stage`, `Severity`), and `from_catalogue`, the one way checks build one. Plain frozen data;
the `Report` that holds findings is in `_findings.py`.

Priority (the seed's order, cheapest and widest check first):
    shape → dtype → device → layout → numerical → gradient → silent → data → distributed
    → memory → environment → other
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
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


def jsonable(value: Any) -> Any:
    """Evidence values as JSON: summaries via to_dict, tuples as lists, torch dtypes as str."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
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
            "evidence": jsonable(self.evidence),
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
    return Finding(category=Category(category), code=code, message=msg(message_key, **fields),
                   file=frame.file if frame is not None else None, line=frame.line if frame is not None else None,
                   evidence=ev, **attrs)
