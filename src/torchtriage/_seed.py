"""The seed's six questions (chapter 19, Q1–Q6) as real functions on live objects.

Each keeps the seed's behaviour on its own examples (same return shapes, a `TypeError` when
records are not a list, a `ValueError` listing the known cases, an empty / "ok" result when
clean) and also accepts what a real run has: exceptions, tensors and `Report`s.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn as nn

from ._catalogue import msg
from ._contracts import TensorSpec, _check_shape, check
from ._errors import ConfigError
from ._findings import CATEGORY_ORDER, Report, Severity, Stage
from ._summary import summarize

_FLAGS = ("shape_ok", "dtype_ok", "device_ok", "has_nonfinite", "grad_ok")
_SEED_ORDER = ("shape", "dtype", "device", "numerical", "gradient")


def _flags(args: tuple[Any, ...], kwargs: dict[str, Any], fn: str) -> list[tuple[str, bool]]:
    """The five flags, positional or by keyword, as (category, failed)."""
    if len(args) > len(_FLAGS):
        raise TypeError(f"{fn}() takes the flags {', '.join(_FLAGS)}, a Report or an exception")
    values = dict(zip(_FLAGS, args))
    for k, v in kwargs.items():
        if k not in _FLAGS:
            raise TypeError(f"{fn}() got an unknown flag {k!r}; accepted: {', '.join(_FLAGS)}")
        if k in values:
            raise TypeError(f"{fn}() got flag {k!r} twice")
        values[k] = v
    missing = [k for k in _FLAGS if k not in values]
    if missing:
        raise TypeError(f"{fn}() is missing the flag(s) {', '.join(missing)}")
    v = {k: bool(x) for k, x in values.items()}
    return [("shape", not v["shape_ok"]), ("dtype", not v["dtype_ok"]), ("device", not v["device_ok"]),
            ("numerical", v["has_nonfinite"]), ("gradient", not v["grad_ok"])]


def _as_report(obj: Any) -> Report | None:
    if isinstance(obj, Report):
        return obj
    if isinstance(obj, BaseException):
        from ._triage import triage_exception

        return triage_exception(obj)
    return None


def _categories(report: Report) -> list[str]:
    out: list[str] = []
    for f in report.findings:
        if f.severity is not Severity.INFO and f.category.value not in out:
            out.append(f.category.value)
    return out


def classify_issue(*args: Any, **flags: Any) -> list[str]:
    """The fault categories, in the order to check them; an empty list when clean.

    Arguments:
        either five flags ``shape_ok, dtype_ok, device_ok, has_nonfinite, grad_ok``
        (positional or keyword), or one exception, or one `Report`.

    Returns:
        Category names (``"shape"``, ``"dtype"``, ``"device"``, ``"layout"``, ``"numerical"``,
        ``"gradient"``, ...) in priority order; ``[]`` when nothing is wrong.

    Example:
        >>> classify_issue(shape_ok=False, dtype_ok=True, device_ok=False, has_nonfinite=True, grad_ok=False)
        ['shape', 'device', 'numerical', 'gradient']
    """
    if len(args) == 1 and not flags:
        report = _as_report(args[0])
        if report is not None:
            return _categories(report)
    return [name for name, failed in _flags(args, flags, "classify_issue") if failed]


# ---------------------------------------------------------------- Q2
_FIELDS = ("shape", "dtype", "device", "contiguous")


def audit_tensor_contract(actual: Any, expected: Mapping[str, Any]) -> dict[str, Any]:
    """Compare a tensor with a contract field by field; name the first field to fix.

    Arguments:
        actual: a tensor, or a dict ``{"shape", "dtype", "device", "contiguous"}``.
        expected: a dict with any of ``shape`` (a tuple, or a spec such as ``"B 8 4"``),
            ``dtype``, ``device`` and ``contiguous``.

    Returns:
        ``{"checks": {"shape_ok": bool, ...}, "first_failure": "contiguous_ok" | None,
        "dims": {...}}``; fields are checked in the order shape → dtype → device → contiguous.

    Example:
        >>> r = audit_tensor_contract(torch.randn(2, 4, 8).transpose(1, 2),
        ...                           {"shape": (2, 8, 4), "dtype": "torch.float32", "device": "cpu",
        ...                            "contiguous": True})
        >>> [k for k, ok in r["checks"].items() if not ok]
        ['contiguous_ok']
    """
    if not isinstance(expected, Mapping):
        raise TypeError(f"expected must be a dict of {', '.join(_FIELDS)}, got {type(expected).__name__}")
    unknown = set(expected) - set(_FIELDS)
    if unknown:
        raise ConfigError(msg("contract.bad_field", fields=", ".join(sorted(map(str, unknown)))))
    spec = TensorSpec.parse(dict(expected))
    dims: dict[str, int] = {}
    if isinstance(actual, torch.Tensor):
        failed = {f.field for f in check(actual, spec, dims)}
    elif isinstance(actual, Mapping):
        failed = _dict_failures(actual, spec, dims)
    else:
        raise TypeError(f"actual must be a tensor or a dict of {', '.join(_FIELDS)}, got {type(actual).__name__}")
    checks = {f"{k}_ok": k not in failed for k in _FIELDS if k in expected}
    first = next((k for k, ok in checks.items() if not ok), None)
    return {"checks": checks, "first_failure": first, "dims": dims}


def _dict_failures(actual: Mapping[str, Any], spec: TensorSpec, dims: dict[str, int]) -> set[str]:
    failed = set()
    if spec.shape is not None and _check_shape(tuple(actual.get("shape", ())), spec.shape, dims):
        failed.add("shape")
    if spec.dtype is not None:
        got = str(actual.get("dtype", "")).replace("torch.", "")
        if got not in {str(d).replace("torch.", "") for d in spec.dtype}:
            failed.add("dtype")
    if spec.device is not None and str(actual.get("device")) != spec.device:
        if not (spec.device == "cuda" and str(actual.get("device", "")).startswith("cuda")):
            failed.add("device")
    if spec.contiguous is not None and bool(actual.get("contiguous")) != spec.contiguous:
        failed.add("contiguous")
    return failed


# ---------------------------------------------------------------- Q3
def first_nonfinite_step(records: Any) -> dict[str, Any] | None:
    """The first NaN / +Inf / -Inf of an ordered trace of (source, value).

    Arguments:
        records: a list of ``(source, value)`` in execution order; a value is a number or a
            tensor (a tensor counts as non-finite when any element is). Or a `Report` /
            `Session` of a watched run: the answer is its first non-finite finding, found by
            replaying the recorded step (issue 11): ``{"index": step, "source": stage, "op",
            "module", "file", "line", "localized_by", "finding"}``.

    Returns:
        ``{"index", "source", "value"}`` (plus ``"evidence"``, a `TensorSummary`, for tensors),
        or None when every value is finite.

    Example:
        >>> first_nonfinite_step([("loss", 1.0), ("gradient", float("nan"))])
        {'index': 1, 'source': 'gradient', 'value': nan}
    """
    report = _as_run_report(records)
    if report is not None:
        found = [f for f in report.findings if f.category.value == "numerical" and f.severity.value != "info"
                 and f.code != "numerical.amp_skipped_step"]
        if not found:
            return None
        f = min(found, key=lambda f: (f.step if f.step is not None else 1 << 30, f.order))
        return {"index": f.step, "source": f.stage.value if f.stage is not None else None, "value": f.code,
                "op": f.op, "module": f.module, "file": f.file, "line": f.line,
                "localized_by": f.evidence.get("localized_by"), "finding": f}
    if not isinstance(records, list):
        raise TypeError(msg("seed.records_not_list", got=type(records).__name__))
    for idx, record in enumerate(records):
        if not isinstance(record, (tuple, list)) or len(record) != 2:
            raise TypeError(msg("seed.bad_record", index=idx, got=repr(record)[:80]))
        source, value = record
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() or value.is_complex():
                if not bool(torch.isfinite(value).all()):  # one sync per record: a report API
                    return {"index": idx, "source": source, "value": value, "evidence": summarize(value)}
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise TypeError(msg("seed.bad_value", index=idx, got=type(value).__name__)) from None
        if not math.isfinite(number):
            return {"index": idx, "source": source, "value": value}
    return None


# ---------------------------------------------------------------- Q4
NONE_GRAD_CASES = ("detach", "no_grad", "leaf", "unregistered", "non_leaf", "inference_mode", "unreached")


def diagnose_none_grad(case: Any, *, module: nn.Module | None = None,
                       scope: Mapping[str, Any] | None = None) -> str:
    """Why a gradient is None, for a named case or a live tensor / parameter.

    Arguments:
        case: one of `NONE_GRAD_CASES` (``"detach"``, ``"no_grad"``, ``"leaf"``,
            ``"unregistered"``, and ``"non_leaf"``, ``"inference_mode"``, ``"unreached"``),
            or the tensor whose ``.grad`` is None.
        module: with a tensor, the model it should belong to (finds unregistered tensors).
        scope: with a tensor, where to look for the tensor it was detached from (default:
            the caller's local variables).

    Returns:
        The cause, one sentence from the catalogue.

    Example:
        >>> w = torch.randn(2, requires_grad=True); d = w.detach()
        >>> diagnose_none_grad(d)
        'tensor disconnected from graph'
    """
    if isinstance(case, str):
        if case not in NONE_GRAD_CASES:
            raise ValueError(msg("seed.unknown_case", case=repr(case), known=", ".join(NONE_GRAD_CASES)))
        return msg(f"seed.none_grad.{case}")
    if not isinstance(case, torch.Tensor):
        raise TypeError(msg("seed.bad_case", got=type(case).__name__, known=", ".join(NONE_GRAD_CASES)))
    known = _from_session(case)
    if known is not None:
        return known
    if scope is None:
        scope = sys._getframe(1).f_locals
    return msg(f"seed.none_grad.{_live_case(case, module, scope)}")


def _as_run_report(obj: Any) -> Report | None:
    if isinstance(obj, Report):
        return obj
    report = getattr(obj, "report", None)  # a Session
    return report if isinstance(report, Report) and hasattr(obj, "param_index") else None


def _from_session(t: torch.Tensor) -> str | None:
    """Inside a watched run: the cause a gradient finding gave for this parameter (its name in
    the session's parameter index: a module parameter or a raw tensor an optimizer holds)."""
    from ._session import current_session

    sess = current_session()
    name = sess.param_index.name(t) if sess is not None else None
    if sess is None or name is None:
        return None
    for f in sess.report.findings:
        names = f.evidence.get("parameters") if isinstance(f.evidence, Mapping) else None
        if f.category.value == "gradient" and (f.parameter == name or (isinstance(names, list) and name in names)):
            return f.cause
    return None


def _live_case(t: torch.Tensor, module: nn.Module | None, scope: Mapping[str, Any]) -> str:
    if t.requires_grad and not t.is_leaf and not t.retains_grad:
        return "non_leaf"  # checked first: reading .grad of a non-leaf warns
    if t.grad is not None:
        return "present_zero" if not bool(t.grad.any()) else "present"
    if module is not None and t.requires_grad and t.is_leaf and not any(t is p for p in module.parameters()):
        return "unregistered"
    if t.requires_grad:
        return "unreached"
    if isinstance(t, nn.Parameter):
        return "leaf"
    if t.is_inference():
        return "inference_mode"
    if _detached_from(t, scope, module):
        return "detach"
    if t.is_leaf and t.grad_fn is None:
        # A fresh tensor without history: created under no_grad (or from data). Which of the
        # two cannot be told afterwards; both need requires_grad on the path to the loss.
        return "no_grad"
    return "leaf"


def _detached_from(t: torch.Tensor, scope: Mapping[str, Any], module: nn.Module | None) -> bool:
    try:
        ptr = t.untyped_storage().data_ptr()
    except Exception:
        return False
    candidates = [v for v in scope.values() if isinstance(v, torch.Tensor)]
    if module is not None:
        candidates += list(module.parameters())
    return any(c is not t and c.requires_grad and c.untyped_storage().data_ptr() == ptr for c in candidates)


# ---------------------------------------------------------------- Q5
def debug_priority(*args: Any, **flags: Any) -> dict[str, Any]:
    """The first thing to check, its rank, what is checked up to it, and why.

    Arguments:
        the five flags of `classify_issue`, or one `Report` (or exception).

    Returns:
        ``{"primary": category | "ok", "rank": int | None, "checked": [...], "reason": str}``.

    Example:
        >>> debug_priority(False, True, False, True, False)["primary"]
        'shape'
    """
    if len(args) == 1 and not flags:
        report = _as_report(args[0])
        if report is not None:
            order = [c.value for c in CATEGORY_ORDER]
            primary = report.primary
            if primary is None:
                return {"primary": "ok", "rank": None, "checked": order, "reason": msg("seed.priority.ok")}
            rank = order.index(primary.category.value) + 1
            return {"primary": primary.category.value, "rank": rank, "checked": order[:rank],
                    "reason": msg(f"seed.priority.{primary.category.value}")}
    checks = _flags(args, flags, "debug_priority")
    for rank, (name, failed) in enumerate(checks, start=1):
        if failed:
            return {"primary": name, "rank": rank, "checked": [k for k, _ in checks[:rank]],
                    "reason": msg(f"seed.priority.{name}")}
    return {"primary": "ok", "rank": None, "checked": [k for k, _ in checks], "reason": msg("seed.priority.ok")}


# ---------------------------------------------------------------- Q6
_ZONES = {"loss": "loss", "activation": "activation", "forward": "activation", "gradient": "gradient",
          "backward": "gradient"}
_NEXT = {"loss": "inspect_loss_inputs_and_numeric_range", "activation": "inspect_forward_activation",
         "gradient": "return_to_Q4_gradient_chain"}
_STAGE_ZONE = {Stage.FORWARD: "activation", Stage.LOSS: "loss", Stage.BACKWARD: "gradient",
               Stage.OPTIMIZER: "gradient", Stage.PARAMETER: "gradient", Stage.DATA: "data"}


def locate_failure_zone(records: Any) -> dict[str, Any]:
    """The first failing zone (loss, activation, gradient) and the next check.

    Arguments:
        records: a list of ``{"stage": "loss"|"activation"|"gradient", "finite": bool}``
            in execution order (``"forward"``/``"backward"`` are accepted aliases), or a `Report`.

    Returns:
        ``{"zone", "step", "next_check"}``; ``{"zone": "ok", "step": None, "next_check":
        "continue_monitoring"}`` when everything is finite. From a Report, ``step`` is the
        training step and ``next_check`` the primary finding's next check.

    Example:
        >>> locate_failure_zone([{"stage": "loss", "finite": True}, {"stage": "activation", "finite": False}])
        {'zone': 'activation', 'step': 2, 'next_check': 'inspect_forward_activation'}
    """
    if isinstance(records, Report):
        f = records.primary
        if f is None:
            return {"zone": "ok", "step": None, "next_check": "continue_monitoring"}
        where = _STAGE_ZONE.get(f.stage, f.category.value) if f.stage is not None else f.category.value
        return {"zone": where, "step": f.step, "next_check": f.next_check, "finding": f}
    if not isinstance(records, list):
        raise TypeError(msg("seed.records_not_list", got=type(records).__name__))
    for idx, record in enumerate(records, start=1):
        if not isinstance(record, Mapping) or "stage" not in record or "finite" not in record:
            raise TypeError(msg("seed.bad_zone_record", index=idx - 1, got=repr(record)[:80]))
        zone = _ZONES.get(record["stage"])
        if zone is None:
            raise ValueError(msg("seed.unknown_stage", stage=repr(record["stage"]), known=", ".join(_ZONES)))
        if not record["finite"]:
            return {"zone": zone, "step": idx, "next_check": _NEXT[zone]}
    return {"zone": "ok", "step": None, "next_check": "continue_monitoring"}


__all__ = ["NONE_GRAD_CASES", "audit_tensor_contract", "classify_issue", "debug_priority",
           "diagnose_none_grad", "first_nonfinite_step", "locate_failure_zone"]
