"""Loss broadcasting: when prediction and target combine into MORE elements than either holds.

A loss compares each prediction with its own target. Broadcasting that makes the result larger
than both operands (`(N, 1)` against `(N,)` gives `(N, N)`) compares every prediction with every
target instead: the loss is legal, finite, trainable and wrong (seed G.2: 1.333333 where the
right answer is 0.000000). Legitimate broadcasting never grows the result past the larger
operand: a bias `(C,)` on `(N, C)`, a mask `(N, 1)` on `(N, C)`, per-channel scales.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .._findings import Finding, Report, Severity, Stage
from .._frames import UserFrame, user_frame_from_stack
from ._common import finding, fmt, shape


def _numel(s: tuple[int, ...]) -> int:
    n = 1
    for d in s:
        n *= d
    return n


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(torch.broadcast_shapes(a, b))
    except RuntimeError:
        return None


def grows(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The broadcast shape when it has more elements than both `a` and `b`, else None."""
    r = broadcast_shape(a, b)
    if r is None or _numel(r) <= max(_numel(a), _numel(b)):
        return None
    return r


def outer_sample_broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The `(N, 1)` vs `(N,)` pattern in hand-written code: the lower-rank operand equals the
    higher-rank one's leading dims (both hold the same samples), yet right-aligned broadcasting
    makes an outer product. A deliberate outer product spells its axes out (`a[:, None] - b[None, :]`,
    same rank), so it is not matched."""
    r = grows(a, b)
    if r is None or len(a) == len(b) or min(len(a), len(b)) == 0:
        return None
    lo, hi = (a, b) if len(a) < len(b) else (b, a)
    if hi[: len(lo)] != lo or any(d != 1 for d in hi[len(lo):]):
        return None
    return r


def _size_at(s: tuple[int, ...], pos: int, rank: int) -> int:
    """The size `s` has at position `pos` of a rank-`rank` broadcast (1 where it has no axis)."""
    i = pos - (rank - len(s))
    return s[i] if i >= 0 else 1


def paired_batch_broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """Both operands hold the same N >= 2 samples on their first axis, yet right-aligned
    broadcasting puts those axes at two different positions of the result, each against a 1 (or
    no axis) of the other: the result holds N x N sample pairs (`(N, 1, H, W)` against
    `(N, 1, 1, H, W)` gives `(N, N, 1, H, W)`). The `(N, 1)` vs `(N,)` pattern is one case. A
    deliberate pairing of two batches spells its axes out (`a[:, None] - b[None, :]`: `b`'s
    first axis is 1), so it is not matched."""
    r = grows(a, b)
    if r is None or not a or not b or a[0] != b[0] or a[0] < 2:
        return None
    rank = len(r)
    pa, pb = rank - len(a), rank - len(b)
    if pa == pb or _size_at(b, pa, rank) != 1 or _size_at(a, pb, rank) != 1:
        return None
    return r


def aligned(prediction: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Prediction and target with the same shape (the prediction's), when they hold as many elements."""
    if prediction.numel() != target.numel():
        return None
    return prediction, target.reshape(prediction.shape)


def broadcast_finding(*, op: str, prediction_shape: tuple[int, ...], target_shape: tuple[int, ...],
                      result_shape: tuple[int, ...], computed: float | None, fixed: float | None,
                      frame: UserFrame | None, module: str | None = None, step: int | None = None,
                      severity: Severity = Severity.ERROR, paired: bool = False,
                      select: bool = False) -> Finding:
    evidence: dict[str, object] = {
        "prediction_shape": prediction_shape, "target_shape": target_shape, "broadcast_shape": result_shape,
        "loss_computed": fmt(computed) if computed is not None else "n/a",
        "loss_aligned": fmt(fixed) if fixed is not None else "n/a"}
    n = prediction_shape[0] if prediction_shape else 0
    if paired:
        evidence["targets_per_prediction"] = n
    return finding(
        "loss_broadcast", severity=severity, stage=Stage.LOSS, frame=frame, module=module, op=op, step=step,
        evidence=evidence, variant="paired" if paired else ("select" if select else None), n=n,
        pred=list(prediction_shape), target=list(target_shape), result=list(result_shape))


def _mse(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return ((p - t) ** 2).mean()


@torch.no_grad()
def check_loss_broadcast(prediction: torch.Tensor, target: torch.Tensor, *,
                         loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None) -> Report:
    """Check that a loss's prediction and target do not broadcast into a larger shape.

    Arguments:
        prediction: the model's output as passed to the loss.
        target: the target as passed to the loss.
        loss: the loss function `loss(prediction, target)`; default: the mean squared error
            computed by hand, `((prediction - target) ** 2).mean()`.

    Returns:
        A `Report`: empty when the shapes combine elementwise; otherwise one
        `silent.loss_broadcast` finding with both shapes, the broadcast shape, the loss as
        computed and the loss with the target reshaped to the prediction's shape.

    Example:
        >>> r = torchtriage.check_loss_broadcast(torch.tensor([[1.], [2.], [3.]]), torch.tensor([1., 2., 3.]))
        >>> r.primary.evidence["loss_computed"], r.primary.evidence["loss_aligned"]
        ('1.333333', '0.000000')
    """
    if not isinstance(prediction, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise TypeError(f"check_loss_broadcast takes two tensors, got {type(prediction).__name__} "
                        f"and {type(target).__name__}")
    ps, ts = shape(prediction), shape(target)
    result = grows(ps, ts)
    if result is None:
        return Report()
    fn = loss or _mse
    computed = float(fn(prediction, target))
    pair = aligned(prediction, target)
    fixed = float(fn(*pair)) if pair is not None else None
    name = getattr(fn, "__name__", "loss").strip("_") or "loss"
    return Report((broadcast_finding(op=name, prediction_shape=ps, target_shape=ts, result_shape=result,
                                     computed=computed, fixed=fixed, frame=user_frame_from_stack(2)),))
