"""A CutMix label weight must be the share of pixels the sample kept (`silent.mix_weight_not_pixel_share`).

CutMix pastes a box of another sample into each input, `x[:, :, y1:y2, x1:x2] = x[perm, :, y1:y2, x1:x2]`,
and mixes the two labels' losses, `lam * L(out, y) + (1 - lam) * L(out, y[perm])`. The weight of
the sample's own label must be the share of its pixels the paste left, `1 - box area / (H W)`.
A box drawn for the sampled `lam` and then clipped at the image border (or rounded to whole
pixels) is smaller than `1 - lam` says: the mixed label claims more of the other sample than the
input holds.

Read off the step tape (no tensor is read): the paste, an indexed assignment of the step's model
input with slices over its last two axes whose value was taken on the tape from that input,
gives the pasted share; the loss, two loss calls on one prediction with different targets, each
multiplied by a Python number, with weights summing to 1, gives the label weights. The own
label is the one whose target the tape did not take from the other's (`y[perm]`, `y.flip(0)`);
when that cannot be told, the weight nearer to the kept share is compared. The tape is on for
the warm-up steps; a mixed loss first seen later keeps it on for the next few steps (the
mixing branch of a loop that mixes some batches only).
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

from .._findings import Severity
from ._plans import Verdict

GAP = 0.1  # the own label's weight and the kept share of pixels this far apart: a warning
_MULS = frozenset({"__mul__", "__rmul__", "mul", "multiply"})
_TAKES = frozenset({"__getitem__", "flip", "roll", "index_select", "gather", "take", "clone", "contiguous"})


def _number(v: Any) -> float | None:
    """A Python or NumPy real number (not a tensor: its value would need a read)."""
    if isinstance(v, (bool, torch.Tensor)) or not isinstance(v, numbers.Real):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _same_data(a: Any, b: Any) -> bool:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    try:
        return a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.data_ptr() != 0)
    except Exception:  # a tensor without storage
        return False


def _taken_from(t: Any, src: Any, producers: dict[int, Any], depth: int = 4) -> bool:
    """Was `t` taken on the tape from `src` (an index, flip or roll of it, a few ops deep)?"""
    for _ in range(depth):
        op = producers.get(id(t))
        if op is None or op.name not in _TAKES or not op.args:
            return False
        t = op.args[0]
        if _same_data(t, src):
            return True
    return False


def _span(s: Any, size: int) -> int | None:
    if not isinstance(s, slice) or s.step not in (None, 1):
        return None
    try:
        return len(range(size)[slice(None if s.start is None else int(s.start),
                                     None if s.stop is None else int(s.stop))])
    except (TypeError, ValueError):
        return None


def pasted_share(ops: list[Any], inputs: list[torch.Tensor]) -> tuple[float, Any, tuple[int, int]] | None:
    """The share of pixels pasted into a model input from another of its samples, its line and
    the box's (height, width)."""
    producers = {id(op.output): op for op in ops if isinstance(op.output, torch.Tensor)}
    for op in ops:
        if op.name != "__setitem__" or len(op.args) < 3 or not op.before_step:
            continue
        x, key, value = op.args[0], op.args[1], op.args[2]
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or not x.is_floating_point() \
                or not any(_same_data(x, i) for i in inputs) or not isinstance(key, tuple) or len(key) != 4:
            continue
        if any(k != slice(None) for k in key[:2]) or not _taken_from(value, x, producers):
            continue
        h, w = x.shape[-2:]
        sh, sw = _span(key[2], h), _span(key[3], w)
        if sh is None or sw is None or h * w == 0:
            continue
        return sh * sw / (h * w), op.frame, (sh, sw)
    return None


def label_weights(ops: list[Any], losses: list[tuple[Any, Any, Any, Any]]) -> tuple[float, float, bool] | None:
    """(weight of the own label, weight of the other, whether which is own is known) of two loss
    calls on one prediction, each scaled by a Python number, the numbers summing to 1."""
    weight: dict[int, float] = {}
    for op in ops:
        if op.name in _MULS and len(op.args) == 2:
            for a, b in (op.args, op.args[::-1]):
                v = _number(b)
                if isinstance(a, torch.Tensor) and v is not None:
                    weight.setdefault(id(a), v)
    producers = {id(op.output): op for op in ops if isinstance(op.output, torch.Tensor)}
    for i, (out_a, pred_a, tgt_a, _) in enumerate(losses):
        for out_b, pred_b, tgt_b, _ in losses[i + 1:]:
            if pred_a is not pred_b or tgt_a is tgt_b or id(out_a) not in weight or id(out_b) not in weight:
                continue
            wa, wb = weight[id(out_a)], weight[id(out_b)]
            if abs(wa + wb - 1) > 1e-6 or min(wa, wb) < 0:
                continue
            if _taken_from(tgt_b, tgt_a, producers):
                return wa, wb, True
            if _taken_from(tgt_a, tgt_b, producers):
                return wb, wa, True
            return wa, wb, False
    return None


def mix_weight_verdict(ops: list[Any], inputs: list[torch.Tensor],
                       losses: list[tuple[Any, Any, Any, Any]]) -> Verdict | None:
    paste = pasted_share(ops, inputs)
    weights = label_weights(ops, losses) if paste is not None else None
    if paste is None or weights is None:
        return None
    share, paste_frame, box = paste
    own, other, known = weights
    kept = 1 - share
    gap = abs(own - kept) if known else min(abs(own - kept), abs(other - kept))
    if gap < GAP:
        return None
    return dict(name="mix_weight_not_pixel_share", severity=Severity.WARNING,
                weight=f"{own:.3f}", kept=f"{kept:.3f}", gap=f"{gap:.3f}",
                evidence={"label_weight_own": round(own, 4), "label_weight_other": round(other, 4),
                          "pixel_share_kept": round(kept, 4), "pixel_share_pasted": round(share, 4),
                          "box": list(box), "gap": round(gap, 4), "own_label_known": known,
                          "paste_line": getattr(paste_frame, "line", None)})
