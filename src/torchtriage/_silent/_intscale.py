"""Integer data scaled by another integer type's maximum (session 11).

Bringing integer data (an image decoded as uint8 / uint16, a 16-bit PNG read as int32) to
[0, 1] divides it by the maximum its producer can write: 255 for 8-bit data, 65535 for 16-bit
data. A constant written for 8-bit data applied to 16-bit data gives values up to 257: inputs
far outside the range the code intends, with no error (a quarter of a dataset 200 times too
bright is trained on as it is).

Read on the warm-up steps' tape (`StepRecord.ops`, the ops before the step's first model
call): a division by `c` (or a product with `1 / c`) of an integer tensor, or of a float
tensor converted on the tape from one, where `c` is the maximum of a narrower unsigned type
(255, 65535) than the integer tensor's. The harm is measured, riding the step's read: the
integer values' maximum against `c` (the quotient's maximum above 1 means values outside
[0, 1]); a maximum within `c` (16-bit files holding 8-bit values) says nothing.
"""

from __future__ import annotations

from typing import Any

import torch

from .._findings import Severity, Stage
from ._plans import Plan

_DIVS = frozenset({"__truediv__", "__itruediv__", "div", "div_", "divide", "true_divide", "true_divide_"})
_MULS = frozenset({"__mul__", "__rmul__", "__imul__", "mul", "mul_", "multiply"})
_CASTS = frozenset({"to", "float", "double", "half", "bfloat16", "type", "type_as"})
_SCALES = {255: "8-bit", 65535: "16-bit"}  # the maxima of the unsigned types narrower than the data's
MAX_CANDIDATES = 8  # per step
FAR = 2.0  # a quotient maximum this many times the intended 1 is a warning


def _is_int(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex() \
        and t.dtype is not torch.bool and t.numel() > 0


def _bits(dtype: torch.dtype) -> int:
    return torch.iinfo(dtype).bits


def _scale(func: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The constant `c` of `x / c` or `x * (1 / c)` when it is a narrower type's maximum."""
    other = args[1] if len(args) > 1 else kwargs.get("other")
    if isinstance(other, torch.Tensor) and other.numel() == 1 and other.dim() == 0 and not other.requires_grad:
        return None  # (a tensor divisor's value would need a read: not the literal this is about)
    if not isinstance(other, (int, float)) or isinstance(other, bool) or other == 0:
        return None
    c = float(other) if func in _DIVS else 1.0 / float(other)
    r = round(c)
    return r if r in _SCALES and abs(c - r) < 1e-3 else None


def int_scale_plans(ops: list[Any], done: set[int]) -> list[tuple[Plan, Any, str]]:
    """Plans for the divisions of integer data by a narrower type's maximum among `ops` (the
    tape's ops before the model); `done`: the `seq` of ops already read (each op once)."""
    converted: dict[int, torch.Tensor] = {}  # id(float output) -> the integer tensor it came from
    out: list[tuple[Plan, Any, str]] = []
    for op in ops:
        if op.seq in done:
            continue
        done.add(op.seq)
        name = op.name.rsplit(".", 1)[-1]
        x = op.args[0] if op.args else None
        if not isinstance(x, torch.Tensor):
            continue
        if name in _CASTS and isinstance(op.output, torch.Tensor) and op.output.is_floating_point():
            src = x if _is_int(x) else converted.get(id(x))
            if src is not None:
                converted[id(op.output)] = src
            continue
        if name not in _DIVS and name not in _MULS:
            continue
        src = x if _is_int(x) else converted.get(id(x))
        if src is None or not isinstance(op.output, torch.Tensor) or len(out) >= MAX_CANDIDATES:
            continue
        c = _scale(name, op.args, op.kwargs)
        if c is None or torch.iinfo(src.dtype).max <= c or _bits(src.dtype) <= 8:
            continue
        out.append((_plan(src, op.output, c), op.frame, op.name))
    return out


def _plan(src: torch.Tensor, quotient: torch.Tensor, c: int) -> Plan:
    with torch.no_grad():
        flat = src.detach().reshape(-1).double()  # (uint16 and uint32 have no max kernel)
        values = [flat.max(), (flat > c).sum().double()]
    n = flat.numel()
    dtype = str(src.dtype).replace("torch.", "")
    limit = torch.iinfo(src.dtype).max
    shape = tuple(quotient.shape)

    def judge(vals: list[float]) -> dict[str, Any] | None:
        top, above = vals
        if top <= c:
            return None  # within the narrower type: the quotient stays in [0, 1]
        q = top / c
        return dict(name="int_scaled_as_narrower", family="data", stage=Stage.DATA,
                    severity=Severity.WARNING if q >= FAR else Severity.INFO,
                    dtype=dtype, c=c, kind=_SCALES[c], top=int(top), q=f"{q:.3g}", limit=limit,
                    evidence={"dtype": dtype, "divisor": c, "dtype_max": limit, "data_max": int(top),
                              "result_max": round(q, 4), "elements_above_divisor": int(above),
                              "elements": int(n), "result_shape": list(shape)})
    return Plan(values, judge)
