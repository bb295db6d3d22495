"""Why an op produced a non-finite value: op families, their evidence, cause and next check.

Given the op's name and the tensors it saw, `explain` measures the evidence a user can verify
(an exp input above log(float32 max) ≈ 88.72, zeros fed to log, a zero divisor, a negative
under sqrt, a value past float16's 65504, a softmax row that is all -inf) and picks the
catalogue sentences for it. Runs on the report path only (it reads tensor values).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import torch

from .._catalogue import msg
from .._summary import summarize
from ._trace import nonfinite

EXP = {"exp", "exp2", "expm1", "sinh", "cosh", "softplus"}
LOG = {"log", "log2", "log10", "log1p", "xlogy", "special_xlog1py", "log_sigmoid_forward"}
DIV = {"div", "reciprocal", "remainder", "fmod", "floor_divide", "true_divide", "var", "std",
       "var_mean", "std_mean", "mean", "rsqrt"}
SQRT = {"sqrt", "rsqrt", "acos", "asin", "acosh", "atanh"}
POW = {"pow", "float_power"}
SOFTMAX = {"_softmax", "softmax", "_log_softmax", "log_softmax", "_safe_softmax"}
LOW = (torch.float16, torch.bfloat16)


@dataclasses.dataclass
class Explanation:
    family: str
    cause: str
    next_check: str
    evidence: dict[str, Any]


def base_name(op: str) -> str:
    """'aten::log.default' / 'aten.log' / 'LogBackward0' → 'log'."""
    if "Backward" in op:
        op = re.sub(r"(?<!^)(?=[A-Z])", "_", re.sub(r"Backward\d*$", "", op)).lower()
    name = op.split("::")[-1].split(".")[0]
    if name.startswith("aten"):
        name = name[4:].lstrip("._")
    return name.rstrip("_") if name.endswith("_") and not name.startswith("_") else name


def _floats(ts: list[Any]) -> list[torch.Tensor]:
    return [t for t in ts if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()]


def _limit(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).max)


@torch.no_grad()
def explain(op: str, inputs: list[Any], output: Any, *, scalars: tuple[Any, ...] = ()) -> Explanation:
    """The op family's cause, next check and evidence for `op(inputs) -> output`."""
    name = base_name(op)
    ins = _floats(inputs)
    # every tensor operand, counts and masks too: `x.sum() / mask.sum()` divides by an int64
    tensors = [t for t in inputs if isinstance(t, torch.Tensor) and t.numel()]
    out = output if isinstance(output, torch.Tensor) else None
    ev: dict[str, Any] = {}
    for i, t in enumerate(tensors[:3]):
        ev[msg("nonfinite.ev.input", index=i)] = summarize(t)
    if out is not None:
        ev[msg("nonfinite.ev.output")] = summarize(out)
    x = ins[0] if ins else None
    dtype = out.dtype if out is not None and out.is_floating_point() else (x.dtype if x is not None else torch.float32)

    def pick(family: str, **fields: Any) -> Explanation:
        return Explanation(family, msg(f"nonfinite.cause.{family}", **fields),
                           msg(f"nonfinite.next.{family}"), ev)

    if name in SOFTMAX and x is not None and x.dim() > 0:
        dim = next((s for s in scalars if isinstance(s, int) and not isinstance(s, bool)), -1)
        rows = int(torch.isneginf(x).all(dim=dim).sum())
        if rows:
            ev["fully masked rows"] = rows
            return pick("masked", rows=rows)
    if name in EXP or name in SOFTMAX:
        if x is not None:
            hi = float(x.float().max())
            limit = math.log(_limit(dtype))
            ev["largest input"] = hi
            ev[f"log({_dtype(dtype)} max)"] = round(limit, 2)
            if hi > limit:
                return pick("exp", dtype=_dtype(dtype), limit=limit, value=hi)
    if name in LOG and x is not None:
        zeros, neg = int((x == 0).sum()), int((x < 0).sum())
        ev["zeros in input"], ev["negatives in input"] = zeros, neg
        if zeros or neg:
            return pick("log", zeros=zeros, negatives=neg)
    if name in SQRT and x is not None:
        neg = int((x < 0).sum())
        if neg:
            ev["negatives in input"] = neg
            return pick("sqrt", negatives=neg)
    if name in DIV:
        d = tensors[1] if len(tensors) > 1 else (x if name in ("reciprocal", "rsqrt") else None)
        if d is not None:
            zeros = int((d == 0).sum())
            ev["zeros in divisor"] = zeros
            if zeros:
                return pick("div", zeros=zeros)
        elif any(isinstance(s, (int, float)) and s == 0 for s in scalars):
            ev["divisor"] = 0
            return pick("div", zeros=1)
        if name in ("var", "std", "var_mean", "std_mean", "mean") and x is not None:
            ev["elements"] = x.numel()
    if out is not None and ins and not any(nonfinite(t) for t in ins):
        value = max(float(t.abs().max()) for t in ins)
        family = "low_precision" if dtype in LOW else "overflow"
        if bool(torch.isinf(out).any()):
            ev[f"{_dtype(dtype)} max"] = _limit(dtype)
            return pick(family, dtype=_dtype(dtype), limit=_limit(dtype), value=value)
    if name in POW:
        return pick("pow")
    return Explanation("generic", msg("nonfinite.cause.generic", op=op), msg("nonfinite.next.generic"), ev)


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def kind_of(t: Any) -> str:
    """'nan', 'posinf', 'neginf' or 'mixed' for a non-finite tensor (reads its values)."""
    if not isinstance(t, torch.Tensor):
        return "mixed"
    x = torch.view_as_real(t) if t.is_complex() else t
    nan, pos, neg = bool(torch.isnan(x).any()), bool(torch.isposinf(x).any()), bool(torch.isneginf(x).any())
    if nan + pos + neg != 1:
        return "nan" if nan and not (pos or neg) else "mixed"
    return "nan" if nan else ("posinf" if pos else "neginf")


def kind_text(kind: str) -> str:
    return msg(f"nonfinite.kind.{kind}")
