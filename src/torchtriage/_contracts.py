"""Tensor contracts: shape (named dims), dtype, device and contiguity, checked on live tensors.

Shape specs are strings of space-separated tokens (or a tuple of ints and names):
    "B T C"    named dims, bound on first sight and held equal across every tensor of a call
    "B 3 H W"  literal sizes
    "B * C"    `*` matches any one dimension
    "B ... C"  `...` matches any number of dimensions (at most once)
`audit_tensor` checks one tensor and returns a `Report` with one finding per failed field;
`expect` attaches a contract to a module's inputs and outputs, checked by hooks on every call.
Failures are ordered shape → dtype → device → layout (seed Q2): the primary is the one to fix
first. Malformed specs raise `ConfigError` naming the bad token and the accepted forms.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import warnings
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn as nn

from ._catalogue import msg
from ._errors import ConfigError, ContractError, TriageWarning
from ._findings import Category, Finding, Report, Severity, Stage, from_catalogue
from ._frames import user_stacklevel
from ._summary import describe

_NAME = re.compile(r"[A-Za-z_]\w*$")
_ON_FAIL = ("raise", "warn", "record")


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A parsed contract for one tensor. Build it with `TensorSpec.parse(...)` or a dict."""

    shape: tuple[str | int, ...] | None = None  # names, ints, "*" and at most one "..."
    dtype: tuple[torch.dtype, ...] | None = None
    device: str | None = None  # "cpu", "cuda", "cuda:1", "meta", ...
    contiguous: bool | None = None

    @classmethod
    def parse(cls, spec: Any = None, *, shape: Any = None, dtype: Any = None, device: Any = None,
              contiguous: Any = None) -> TensorSpec:
        """From a shape string, a dict of fields, a TensorSpec, or keyword fields."""
        if isinstance(spec, TensorSpec):
            return spec
        if isinstance(spec, Mapping):
            unknown = set(spec) - {"shape", "dtype", "device", "contiguous"}
            if unknown:
                raise ConfigError(msg("contract.bad_field", fields=", ".join(sorted(map(str, unknown)))))
            return cls.parse(None, **spec)
        if spec is not None:
            if shape is not None:
                raise ConfigError(msg("contract.bad_spec", spec=repr(spec)))
            if not isinstance(spec, (str, tuple, list, torch.Size)):
                raise ConfigError(msg("contract.bad_spec", spec=repr(spec)))
            shape = spec
        return cls(_parse_shape(shape), _parse_dtype(dtype), _parse_device(device), _parse_contiguous(contiguous))

    def describe(self) -> str:
        parts = []
        if self.shape is not None:
            parts.append(f'shape "{_shape_text(self.shape)}"')
        if self.dtype is not None:
            parts.append("dtype " + "|".join(str(d).replace("torch.", "") for d in self.dtype))
        if self.device is not None:
            parts.append(f"device {self.device}")
        if self.contiguous is not None:
            parts.append("contiguous" if self.contiguous else "non-contiguous")
        return ", ".join(parts) or "any tensor"


def _shape_text(shape: tuple[str | int, ...]) -> str:
    return " ".join(str(s) for s in shape)


def _parse_shape(shape: Any) -> tuple[str | int, ...] | None:
    if shape is None:
        return None
    if isinstance(shape, str):
        raw: list[Any] = shape.replace(",", " ").split()
    elif isinstance(shape, (tuple, list, torch.Size)):
        raw = list(shape)
    else:
        raise ConfigError(msg("contract.bad_shape_type", got=type(shape).__name__))
    out: list[str | int] = []
    for tok in raw:
        if isinstance(tok, bool):
            raise ConfigError(msg("contract.bad_token", token=repr(tok), shape=repr(shape)))
        if isinstance(tok, int):
            if tok < 0:
                raise ConfigError(msg("contract.bad_token", token=repr(tok), shape=repr(shape)))
            out.append(tok)
            continue
        if not isinstance(tok, str):
            raise ConfigError(msg("contract.bad_token", token=repr(tok), shape=repr(shape)))
        if tok.isdigit():
            out.append(int(tok))
        elif tok in ("*", "...") or _NAME.match(tok):
            out.append(tok)
        else:
            raise ConfigError(msg("contract.bad_token", token=repr(tok), shape=repr(shape)))
    if out.count("...") > 1:
        raise ConfigError(msg("contract.two_ellipses", shape=repr(shape)))
    return tuple(out)


def _parse_dtype(dtype: Any) -> tuple[torch.dtype, ...] | None:
    if dtype is None:
        return None
    items = list(dtype) if isinstance(dtype, (tuple, list, set, frozenset)) else [dtype]
    out = []
    for d in items:
        if isinstance(d, torch.dtype):
            out.append(d)
            continue
        name = str(d).replace("torch.", "") if isinstance(d, str) else None
        value = getattr(torch, name, None) if name else None
        if not isinstance(value, torch.dtype):
            raise ConfigError(msg("contract.bad_dtype", got=repr(d)))
        out.append(value)
    return tuple(out)


def _parse_device(device: Any) -> str | None:
    if device is None:
        return None
    try:
        return str(torch.device(device))
    except (RuntimeError, TypeError):
        raise ConfigError(msg("contract.bad_device", got=repr(device))) from None


def _parse_contiguous(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ConfigError(msg("contract.bad_contiguous", got=repr(value)))


# ---------------------------------------------------------------- checking
@dataclasses.dataclass(frozen=True)
class Failure:
    field: str  # "shape" | "dtype" | "device" | "contiguous"
    observed: str
    expected: str
    detail: str


_CATEGORY = {"shape": Category.SHAPE, "dtype": Category.DTYPE, "device": Category.DEVICE,
             "contiguous": Category.LAYOUT}


def check(t: Any, spec: TensorSpec, dims: dict[str, int]) -> list[Failure]:
    """Failed fields of `t` against `spec`; binds new named dims into `dims` (in place)."""
    if not isinstance(t, torch.Tensor):
        return [Failure("shape", type(t).__name__, "Tensor", msg("contract.not_tensor", got=type(t).__name__))]
    out = []
    if spec.shape is not None:
        detail = _check_shape(tuple(t.shape), spec.shape, dims)
        if detail:
            out.append(Failure("shape", str(tuple(t.shape)), f'"{_shape_text(spec.shape)}"', detail))
    if spec.dtype is not None and t.dtype not in spec.dtype:
        exp = "|".join(str(d).replace("torch.", "") for d in spec.dtype)
        got = str(t.dtype).replace("torch.", "")
        out.append(Failure("dtype", got, exp, msg("contract.dtype", got=got, expected=exp)))
    if spec.device is not None and not _device_ok(t.device, spec.device):
        out.append(Failure("device", str(t.device), spec.device,
                           msg("contract.device", got=str(t.device), expected=spec.device)))
    if spec.contiguous is not None and t.is_contiguous() != spec.contiguous:
        got = "contiguous" if t.is_contiguous() else "non-contiguous"
        exp = "contiguous" if spec.contiguous else "non-contiguous"
        out.append(Failure("contiguous", f"{got} stride={tuple(t.stride())}", exp,
                           msg("contract.contiguous", got=got, expected=exp, stride=tuple(t.stride()))))
    return out


def _device_ok(actual: torch.device, expected: str) -> bool:
    exp = torch.device(expected)
    return actual.type == exp.type and (exp.index is None or actual.index == exp.index)


def _check_shape(shape: tuple[int, ...], spec: tuple[str | int, ...], dims: dict[str, int]) -> str:
    if "..." in spec:
        i = spec.index("...")
        head, tail = spec[:i], spec[i + 1:]
        if len(shape) < len(head) + len(tail):
            return msg("contract.ndim_at_least", got=len(shape), expected=len(head) + len(tail))
        pairs = list(zip(range(len(head)), head)) + [(len(shape) - len(tail) + j, s) for j, s in enumerate(tail)]
    else:
        if len(shape) != len(spec):
            return msg("contract.ndim", got=len(shape), expected=len(spec))
        pairs = list(enumerate(spec))
    new: dict[str, int] = {}
    for axis, want in pairs:
        size = shape[axis]
        if want == "*":
            continue
        if isinstance(want, int):
            if size != want:
                return msg("contract.dim_literal", axis=axis, got=size, expected=want)
            continue
        bound = dims.get(want, new.get(want))
        if bound is None:
            new[want] = size
        elif bound != size:
            return msg("contract.dim_bound", axis=axis, got=size, name=want, bound=bound)
    dims.update(new)
    return ""


def _bindings(dims: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in dims.items()) or msg("contract.no_binding")


def _finding(f: Failure, *, where: str, tensor: str, t: Any, module: str | None, stage: Stage | None,
             dims: Mapping[str, int]) -> Finding:
    return from_catalogue(
        _CATEGORY[f.field], f"contract.{f.field}", "contract.message",
        fields={"where": where, "tensor": tensor, "detail": f.detail},
        cause_key=f"contract.cause.{f.field}", next_key=f"contract.next.{f.field}",
        evidence={"observed": describe(t), "expected": f.expected, "dims": _bindings(dims)},
        severity=Severity.ERROR, stage=stage, module=module)


def audit_tensor(t: torch.Tensor, *, shape: Any = None, dtype: Any = None, device: Any = None,
                 contiguous: bool | None = None, dims: Mapping[str, int] | None = None,
                 name: str = "tensor") -> Report:
    """Check one tensor against a contract; one finding per failed field, the first to fix first.

    Arguments:
        t: the tensor.
        shape: a shape spec such as ``"B T C"``, ``"B 3 * *"``, ``"B ... C"`` or ``(2, "T", 4)``.
        dtype: a `torch.dtype`, its name (``"float32"``), or a tuple of them.
        device: ``"cpu"``, ``"cuda"`` (any index), ``"cuda:1"``, ``"meta"``, a `torch.device`.
        contiguous: True / False, or None not to check.
        dims: named dims already bound (e.g. ``{"C": 16}``).
        name: how to call the tensor in messages.

    Returns:
        A `Report`: empty when the tensor meets the contract; otherwise `primary` is the field
        to fix first (shape → dtype → device → layout) and `meta["dims"]` the bindings.

    Example:
        >>> torchtriage.audit_tensor(x.transpose(1, 2), shape="B 8 4", contiguous=True).primary.code
        'contract.contiguous'
    """
    spec = TensorSpec.parse(shape=shape, dtype=dtype, device=device, contiguous=contiguous)
    bound = dict(dims or {})
    failures = check(t, spec, bound)
    findings = [_finding(f, where="", tensor=name, t=t, module=None, stage=None, dims=bound)
                for f in failures]
    return Report(tuple(f.replace(order=i) for i, f in enumerate(findings)),
                  meta={"dims": bound, "failed": [f.field for f in failures]})


# ---------------------------------------------------------------- module contracts
def _specs(value: Any, what: str) -> Any:
    """One spec, a tuple of specs (positional), or a dict of specs (by name / key)."""
    if value is None:
        return None
    # A dict with any contract field is one spec (so a misspelt field is an error, not an
    # argument name); other dicts map argument names / output keys to specs.
    if isinstance(value, (str, TensorSpec)) or (isinstance(value, Mapping) and
                                                set(value) & {"shape", "dtype", "device", "contiguous"}):
        return TensorSpec.parse(value)
    if isinstance(value, (list, tuple)):
        return tuple(None if v is None else TensorSpec.parse(v) for v in value)
    if isinstance(value, Mapping):
        return {k: None if v is None else TensorSpec.parse(v) for k, v in value.items()}
    raise ConfigError(msg("contract.bad_io", what=what, got=type(value).__name__))


class ContractHandle:
    """Returned by `expect`: `.remove()` detaches the hooks; `.findings` holds recorded failures."""

    def __init__(self, module: nn.Module, name: str | None, inputs: Any, outputs: Any, on_fail: str) -> None:
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
        self.on_fail = on_fail
        self.findings: list[Finding] = []
        self._stack: list[dict[str, int]] = []
        try:
            self._signature: inspect.Signature | None = inspect.signature(module.forward)
        except (TypeError, ValueError):
            self._signature = None
        self._handles = [
            module.register_forward_pre_hook(self._pre, with_kwargs=True),
            module.register_forward_hook(self._post, with_kwargs=True, always_call=True),
        ]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def __enter__(self) -> ContractHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()

    # the hooks -------------------------------------------------------------------
    def _where(self, module: nn.Module) -> tuple[str | None, str]:
        from ._session import current_session

        s = current_session()
        path = s.module_name(module) if s is not None else None
        path = path if path is not None else self.name
        label = f"{path} ({type(module).__name__})" if path else type(module).__name__
        return path, label

    def _pre(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        __tracebackhide__ = True
        dims: dict[str, int] = {}
        self._stack.append(dims)
        if self.inputs is None:
            return
        self._apply(module, self._pick_inputs(args, kwargs), dims, "input", Stage.FORWARD)

    def _post(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        __tracebackhide__ = True
        dims = self._stack.pop() if self._stack else {}
        if self.outputs is None or (output is None and sys.exc_info()[0] is not None):
            return  # forward raised: nothing to check, the user's exception goes on
        self._apply(module, _pick(self.outputs, output, "output"), dims, "output", Stage.FORWARD)

    def _pick_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any, TensorSpec]]:
        spec = self.inputs
        if isinstance(spec, Mapping):
            named: dict[Any, Any] = dict(enumerate(args))
            if self._signature is not None:
                try:
                    named.update(self._signature.bind_partial(*args, **kwargs).arguments)
                except TypeError:
                    pass
            named.update(kwargs)
            return [(f"input {k}", named.get(k), s) for k, s in spec.items() if s is not None]
        return _pick(spec, args, "input", positional=True)

    def _apply(self, module: nn.Module, items: list[tuple[str, Any, TensorSpec]], dims: dict[str, int],
               side: str, stage: Stage) -> None:
        path, label = self._where(module)
        findings = []
        for tname, value, spec in items:
            for f in check(value, spec, dims):
                findings.append(_finding(f, where=label + " ", tensor=tname, t=value,
                                         module=path, stage=stage, dims=dims))
        if not findings:
            return
        report = Report(tuple(f.replace(order=i) for i, f in enumerate(findings)))
        first = report.findings[0]
        text = msg("contract.error", message=first.message, observed=first.evidence["observed"],
                   expected=first.evidence["expected"], dims=_bindings(dims),
                   others=len(findings) - 1)
        from ._session import current_session

        s = current_session()
        if self.on_fail == "raise":
            if s is not None:
                self._record(s, report)
            raise ContractError(text, first, tuple(f.code.split(".")[1] for f in report.findings))
        if self.on_fail == "warn":
            warnings.warn(text, TriageWarning, stacklevel=user_stacklevel())
        self.findings.extend(report.findings)
        if s is not None and self.on_fail == "record":
            self._record(s, report)

    @staticmethod
    def _record(session: Any, report: Report) -> None:
        from ._errors import AnomalyError

        for f in report.findings:
            try:
                session.add(f)
            except AnomalyError:
                break  # on_anomaly="raise": the ContractError says it


def _pick(spec: Any, value: Any, side: str, positional: bool = False) -> list[tuple[str, Any, TensorSpec]]:
    if isinstance(spec, TensorSpec):
        if positional:
            return [(f"{side}[0]", value[0] if value else None, spec)]
        return [(side, value, spec)]
    if isinstance(spec, tuple):
        seq = value if isinstance(value, (tuple, list)) else (value,)
        return [(f"{side}[{i}]", seq[i] if i < len(seq) else None, s) for i, s in enumerate(spec) if s is not None]
    if isinstance(spec, Mapping):
        get = value.get if isinstance(value, Mapping) else (lambda k: getattr(value, k, None))
        return [(f"{side} {k}", get(k), s) for k, s in spec.items() if s is not None]
    return []


def expect(module: nn.Module, *, inputs: Any = None, outputs: Any = None, on_fail: str = "raise",
           name: str | None = None) -> ContractHandle:
    """Attach a contract to a module's inputs and outputs, checked on every call by hooks.

    Arguments:
        module: the `nn.Module`.
        inputs: a spec for the first positional input (``"B T C"`` or a dict with shape /
            dtype / device / contiguous), a tuple of specs (positional; None skips one), or a
            dict ``{argument name: spec}``.
        outputs: a spec for the output, a tuple of specs for a tuple output, or a dict of
            specs for a dict output.
        on_fail: ``"raise"`` a `ContractError` (default), ``"warn"``, or ``"record"``
            (into the active session, and `handle.findings`).
        name: the module's name in messages outside a session (inside one, its path).

    Returns:
        A `ContractHandle`; call `.remove()` (or use it as a context manager) to detach.

    Example:
        >>> h = torchtriage.expect(model.encoder, inputs="B T C", outputs="B T C")
        >>> model(x)  # raises ContractError naming encoder, the shapes and B/T/C
        >>> h.remove()
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"expect() takes an nn.Module, got {type(module).__name__}")
    if on_fail not in _ON_FAIL:
        raise ConfigError(f"on_fail={on_fail!r} is not valid; accepted: " + ", ".join(map(repr, _ON_FAIL)))
    return ContractHandle(module, name, _specs(inputs, "inputs"), _specs(outputs, "outputs"), on_fail)


for _cls in (TensorSpec, ContractHandle):
    _cls.__module__ = "torchtriage"
