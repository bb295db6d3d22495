"""A tensor's value in four numbers, and when two of them are the same value (issue 28).

`fingerprint(t)` reads one host value per tensor (a recording step only, never a hot hook):
the sum, a weighted sum (fixed weights, so a permutation of the same values — a softmax over
the other dimension of a square matrix — changes it), the L1 norm, the finite min and max and
the count of NaN/Inf. Two fingerprints are the same value when both sums agree within the
dtype's tolerance, relative to the L1 norm (a reduction's rounding error is bounded by it,
whatever order the terms were added in: a refactor that regroups an addition stays equal).
"""

from __future__ import annotations

import math
from typing import Any

import torch

# relative tolerance of a sum, against the tensor's L1 norm, by dtype (issue 28: "a tolerance
# set by the dtype"); integer and bool tensors must agree exactly
RTOL = {"torch.float64": 1e-9, "torch.float32": 1e-4, "torch.float16": 1e-2, "torch.bfloat16": 3e-2,
        "torch.complex64": 1e-4, "torch.complex128": 1e-9}
_weights: dict[tuple[int, str], torch.Tensor] = {}


def _w(n: int, device: torch.device) -> torch.Tensor:
    key = (n, str(device))
    w = _weights.get(key)
    if w is None:
        if len(_weights) > 256:
            _weights.clear()
        w = _weights[key] = torch.cos(torch.arange(n, dtype=torch.float64, device=device) * 0.7548776662)
    return w


@torch.no_grad()
def fingerprint(t: torch.Tensor) -> list[float] | None:
    """[sum, weighted sum, L1, min, max, non-finite count] of `t`, or None (no values to read)."""
    if t.device.type == "meta" or t.is_sparse or t.numel() == 0:
        return None
    x = torch.view_as_real(t.detach()) if t.is_complex() else t.detach()
    x = x.reshape(-1).to(torch.float64)
    finite = torch.isfinite(x)
    v = torch.where(finite, x, torch.zeros((), dtype=x.dtype, device=x.device))
    big = torch.tensor(float("inf"), dtype=x.dtype, device=x.device)
    lo = torch.where(finite, x, big).min()
    hi = torch.where(finite, x, -big).max()
    out = torch.stack([v.sum(), (v * _w(v.numel(), v.device)).sum(), v.abs().sum(), lo, hi,
                       (~finite).sum().to(x.dtype)])
    return [float(a) for a in out.tolist()]


def same_value(a: list[float] | None, b: list[float] | None, dtype: str) -> bool:
    """True when two fingerprints are one value within `dtype`'s tolerance."""
    if a is None or b is None:
        return a is b
    if a[5] != b[5]:
        return False
    rtol = RTOL.get(dtype, 0.0)
    scale = max(a[2], b[2])
    tol = rtol * scale + (1e-12 if rtol else 0.0)
    return all(_close(x, y, tol) for x, y in ((a[0], b[0]), (a[1], b[1]), (a[2], b[2])))


def _close(x: float, y: float, tol: float) -> bool:
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return abs(x - y) <= tol


def describe(shape: Any, dtype: str, fp: list[float] | None) -> str:
    """`float32[4, 8] mean=0.125 min=-1.2 max=2` (what a user can print to check)."""
    head = f"{dtype.replace('torch.', '')}{list(shape)}"
    if fp is None:
        return head
    n = max(1, math.prod(shape) if shape else 1)
    parts = [head, f"sum={fp[0]:.6g}", f"mean={fp[0] / n:.4g}"]
    if math.isfinite(fp[3]):
        parts.append(f"min={fp[3]:.4g} max={fp[4]:.4g}")
    if fp[5]:
        parts.append(f"non-finite={int(fp[5])}")
    return " ".join(parts)
