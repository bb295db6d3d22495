"""Overflow-prone exp: warn while `exp(x)` is still finite but close to the dtype's limit.

`exp(x)` overflows to Inf once x > log(max): 88.72 in float32, 11.09 in float16, 88.72 in
bfloat16, 709.78 in float64; a hand-written softmax then divides Inf by Inf and gives NaN
(seed G.4). Subtracting the row maximum first (or calling `torch.softmax`/`logsumexp`) makes
the largest exponent 0. The margin below the limit defaults to a quarter of it, less the log
of the row length (a sum of n values overflows n times sooner).

In a session the autograd graph already holds what is needed: each `ExpBackward0` node saves
its result, so log(max(result)) is the largest input. The walk runs on the first steps and
then every `silent_exp_every` steps; the maxima are read with the step's one sync.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._findings import Report, Severity, Stage
from .._frames import user_frame_from_stack
from ._common import finding, fmt


def exp_limit(dtype: torch.dtype) -> float:
    """The largest x whose exp is finite in `dtype`."""
    return math.log(torch.finfo(dtype).max)


def default_margin(dtype: torch.dtype) -> float:
    return exp_limit(dtype) / 4


def overflow_verdict(x_max: float, dtype: torch.dtype, n: int, margin: float | None) -> dict[str, Any] | None:
    limit = exp_limit(dtype)
    margin = default_margin(dtype) if margin is None else margin
    room = limit - x_max - math.log(max(n, 1))
    if room > margin:
        return None
    return dict(dtype=str(dtype).replace("torch.", ""), x_max=round(x_max, 4), limit=round(limit, 2),
                room=round(room, 2))


@torch.no_grad()
def check_exp_overflow(x: torch.Tensor, *, dim: int = -1, margin: float | None = None) -> Report:
    """Check whether a hand-written softmax `exp(x) / exp(x).sum(dim)` is about to overflow.

    Arguments:
        x: the scores fed to `exp`.
        dim: the dimension the softmax normalizes over.
        margin: how close (in units of x) to the dtype's exp limit counts as a risk; default a
            quarter of the limit (22.2 for float32, 2.8 for float16).

    Returns:
        A `Report` with `silent.exp_overflow` when max(x) + log(n) is within `margin` of the limit,
        with evidence: whether the direct softmax is all finite, and the sum of the stable softmax
        (max subtracted) computed on the same input. Empty otherwise.

    Example:
        >>> r = torchtriage.check_exp_overflow(torch.tensor([1000., 1001.]))
        >>> r.primary.evidence["direct_all_finite"], r.primary.evidence["stable_sum"]
        (False, '1.000000')
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"check_exp_overflow takes a floating-point tensor, got "
                        f"{x.dtype if isinstance(x, torch.Tensor) else type(x).__name__}")
    if x.numel() == 0:
        return Report()
    v = overflow_verdict(float(x.max()), x.dtype, x.shape[dim] if x.dim() else 1, margin)
    if v is None:
        return Report()
    e = torch.exp(x)
    direct = e / e.sum(dim=dim, keepdim=True) if x.dim() else e / e
    stable = torch.softmax(x.double() if x.dim() else x.double().reshape(1), dim=dim if x.dim() else 0)
    # The stable sum: one row is enough to show it (all rows are 1 by construction).
    row_sum = float(stable.sum(dim=dim if x.dim() else 0).reshape(-1)[0])
    overflowed = not bool(torch.isfinite(e).all())
    return Report((finding("exp_overflow", severity=Severity.ERROR if overflowed else Severity.WARNING,
                           stage=Stage.FORWARD, frame=user_frame_from_stack(3), op="exp", **v,
                           variant="over" if v["room"] < 0 else None,
                           evidence={**v, "exp_overflowed": overflowed,
                                     "direct_all_finite": bool(torch.isfinite(direct).all()),
                                     "stable_sum": fmt(row_sum)}),))


def exp_nodes(root: torch.Tensor, *, depth: int = 64, limit: int = 4000) -> list[tuple[Any, str]]:
    """`(ExpBackward0 node, consumer name)` pairs in root's graph, found by a bounded walk."""
    if root.grad_fn is None:
        return []
    out = []
    seen: set[int] = set()
    frontier: list[tuple[Any, str]] = [(root.grad_fn, "")]
    for _ in range(depth):
        nxt = []
        for node, parent in frontier:
            if node.name() == "ExpBackward0":
                out.append((node, parent))
            for child, _ in node.next_functions:
                if child is not None and id(child) not in seen and len(seen) < limit:
                    seen.add(id(child))
                    nxt.append((child, node.name()))
        frontier = nxt
        if not frontier:
            break
    return out
