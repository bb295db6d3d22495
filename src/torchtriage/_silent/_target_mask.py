"""The mask that multiplies per-token losses must follow the targets, not the inputs.

A next-token loss computed with `reduction="none"` on `labels = input_ids[:, s:]` is masked by
hand: `loss * mask`. Position t of that loss predicts token t + s, so the mask that keeps the
real targets is `attention_mask[:, s:]`. `attention_mask[:, :-s]` (the inputs' mask) keeps,
in every right-padded row, the prediction of the first pad token after the last real one: a
target that is padding (often eos, never learned as a continuation) adds its loss to the sum.

`MaskFollow` is a pass-through `TorchFunctionMode` put on the stack by the silent check right
after such a loss call and taken off at the next event; it waits for the first elementwise
multiplication of that loss output (by identity) with a tensor of its shape, and hands the
multiplier and the user's line to the check, which queues one `Plan` (read with the step's
read). The verdict needs the targets to be the shifted ids of the model call that made the
logits, a 0/1 multiplier, and a kept position whose target is padding.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .._findings import Severity
from .._frames import UserFrame, trims_errors, user_frame_from_stack
from .._modestack import push_mode, remove_mode
from ._common import shape
from ._plans import Plan, Verdict

_MULS = frozenset({"mul", "__mul__", "__rmul__", "multiply"})
_MAX_OPS = 64  # the masking follows the loss within a few ops; past this, stop looking


class MaskFollow(TorchFunctionMode):
    """Waits for `loss * mask` on one per-token loss output; calls `found(mask, frame)` once."""

    def __init__(self, loss: torch.Tensor, found: Callable[[torch.Tensor, UserFrame | None], None],
                 ours: Callable[[], bool]) -> None:
        super().__init__()
        self.loss = weakref.ref(loss)
        self.ours = ours  # True while the op is the checks' own (the next checks' handlers of this event)
        self.found: Callable[[torch.Tensor, UserFrame | None], None] | None = found
        self.active = True
        self.inside = 0
        self.ops = 0

    @trims_errors
    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        __tracebackhide__ = True
        kwargs = kwargs or {}
        # counted on every call: an event of ours that runs inside this op (`loss.backward()`,
        # the next loss call) finds the mode popped by torch, to be pushed back after it
        self.inside += 1
        try:
            out = func(*args, **kwargs)
        finally:
            self.inside -= 1
        if self.active and not self.ours():
            try:
                self._observe(func, args)
            except Exception:  # bookkeeping must never break the user's op
                self.active = False
        return out

    def _observe(self, func: Any, args: tuple[Any, ...]) -> None:
        self.ops += 1
        if self.ops > _MAX_OPS:
            self.active = False
            return
        if getattr(func, "__name__", "") not in _MULS or len(args) < 2:
            return
        loss = self.loss()
        a, b = args[0], args[1]
        other = b if a is loss else a if b is loss else None
        if loss is None or not isinstance(other, torch.Tensor) or tuple(other.shape) != tuple(loss.shape):
            return
        self.active = False
        found, self.found = self.found, None
        if found is not None:
            found(other.detach(), user_frame_from_stack(2))

    def enter(self) -> None:
        push_mode(self)

    def leave(self) -> bool:
        """Off the stack; False when that must wait (inside one of our own calls). What it
        held (the targets, ids and mask the plan needs) is let go at once."""
        self.active = False
        self.found = None
        if self.inside:
            return False
        remove_mode(self)
        return True


def mask_plan(mask: torch.Tensor, target: torch.Tensor, ids: torch.Tensor, attention_mask: torch.Tensor,
              shift: int) -> Plan:
    """Does `mask` keep a position whose target (ids shifted by `shift`) is padding?"""
    with torch.no_grad():
        real = attention_mask[:, shift:] != 0
        keep = mask != 0
        vals = [(target == ids[:, shift:]).all(), ((mask == 0) | (mask == 1)).all(),
                (keep & ~real).sum(), (~keep & real).sum(), (keep == (attention_mask[:, :-shift] != 0)).all(),
                (~real).sum(), keep.sum()]

    def judge(v: list[float]) -> Verdict | None:
        shifted, binary, pad_kept, real_dropped, inputs_mask, pads, kept = v
        if not (shifted and binary and pad_kept > 0):
            return None
        return dict(name="loss_mask_on_inputs", severity=Severity.WARNING, shift=shift,
                    kept=int(pad_kept),
                    evidence={"loss_shape": shape(mask), "target_shift": shift,
                              "pad_targets_kept": int(pad_kept), "real_targets_dropped": int(real_dropped),
                              "pad_targets": int(pads), "positions_kept": int(kept),
                              "mask_equals_inputs_mask": bool(inputs_mask)})

    return Plan(vals, judge)
