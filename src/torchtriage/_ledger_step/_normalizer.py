"""A loss normalized over all ranks, then averaged again by DDP (issue 26, session 8).

DistributedDataParallel averages the ranks' gradients: the step follows the gradient of
`(1 / world) Σ_r loss_r`. A loss that a rank divides by a count summed over every rank (the
global number of tokens, of valid samples: `dist.all_reduce(count)` with the default SUM) is
already a share of the global mean, so `Σ_r loss_r` is the global mean and DDP's average makes
the step `1 / world` of it, as if the learning rate were divided by the world size. The correct
forms multiply by the world size (`loss_sum * world / global_count`) or sum the gradients.

Measured from the step's own graph, no device read: the loss's node chain from its root through
divisions and multiplications by constants (CPU scalars: Python numbers); a division by a tensor
that shares its storage with a tensor this rank all-reduced with SUM is the global divisor. The
constants met on the way give the factor the loss carries; a factor equal to the world size
compensates DDP's mean. Judged only when a DDP wrapper's forward ran since the last backward (its averaging
applies to that backward). A warning: the factor `factor / world` the step is scaled by is
measured in this run.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack

MAX_NUMEL = 64  # counts and small stats vectors; a gradient all-reduce is not a divisor
MAX_KEPT = 64
MAX_DEPTH = 8


def _storage(t: torch.Tensor) -> int | None:
    try:
        return int(t.untyped_storage().data_ptr())
    except Exception:
        return None


def _constant(t: Any) -> float | None:
    """A Python number's wrapped tensor (0-dim, CPU, no grad), as a float; else None."""
    if isinstance(t, torch.Tensor) and t.dim() == 0 and t.device.type == "cpu" and not t.requires_grad:
        return float(t.item())
    return None


class GlobalDivisor:
    def __init__(self, session: Any, world: int) -> None:
        self.session = session
        self.world = world
        self.reduced: dict[int, tuple[weakref.ref[torch.Tensor], str | None]] = {}
        self.found: Finding | None = None

    def install(self) -> None:
        dist = torch.distributed
        original = getattr(dist, "all_reduce", None)
        if original is None:
            return
        watch = self

        def all_reduce(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            try:
                watch.note(tensor, args[0] if args else kwargs.get("op"))
            except Exception as e:
                watch.session.internal_error("step ledger, normalizer", e)
            return original(tensor, *args, **kwargs)

        self.session.patch(dist, "all_reduce", all_reduce)

    def note(self, tensor: Any, op: Any) -> None:
        if self.found is not None or not isinstance(tensor, torch.Tensor) or tensor.numel() > MAX_NUMEL:
            return
        if op is not None and op != torch.distributed.ReduceOp.SUM:
            return
        key = _storage(tensor)
        if key is None:
            return
        if len(self.reduced) >= MAX_KEPT:
            self.reduced = {k: v for k, v in self.reduced.items() if v[0]() is not None}
            if len(self.reduced) >= MAX_KEPT:
                return
        frame = user_frame_from_stack(2)
        self.reduced[key] = (weakref.ref(tensor), f"{frame.file}:{frame.line}" if frame is not None else None)

    def _reduced(self, t: Any) -> tuple[bool, str | None]:
        """(whether `t` shares its storage with a tensor all-reduced with SUM, that call's line)."""
        if not isinstance(t, torch.Tensor):
            return False, None
        key = _storage(t)
        entry = self.reduced.get(key) if key is not None else None
        if entry is None or entry[0]() is None:
            return False, None
        return True, entry[1]

    def backward(self, roots: tuple[torch.Tensor, ...], ddp_in_step: bool) -> None:
        if self.found is not None or not self.reduced or not ddp_in_step:
            return
        for root in roots:
            if isinstance(root, torch.Tensor) and root.numel() == 1 and root.grad_fn is not None:
                self._walk(root)
                if self.found is not None:
                    return

    def _walk(self, root: torch.Tensor) -> None:
        node: Any = root.grad_fn
        factor, divisor_line, divided = 1.0, None, False
        for _ in range(MAX_DEPTH):
            name = type(node).__name__
            if name not in ("DivBackward0", "MulBackward0"):
                break
            try:
                other = node._saved_other
            except (AttributeError, RuntimeError):  # not saved (the other operand needs no grad here), or freed
                return
            hit, line = self._reduced(other) if name == "DivBackward0" and not divided else (False, None)
            c = _constant(other) if not hit else None
            if hit:
                divided, divisor_line = True, line
            elif c is not None and c != 0:
                factor = factor / c if name == "DivBackward0" else factor * c
            else:
                return
            nxt = node.next_functions[0][0] if node.next_functions else None
            if nxt is None:
                break
            node = nxt
        if not divided or abs(factor - self.world) <= 1e-6 * self.world:
            return
        frame = user_frame_from_stack(4)
        scale = factor / self.world
        fields = {"world": self.world, "scale": f"{scale:.3g}", "factor": f"{factor:g}",
                  "reduced": os.path.basename(divisor_line) if divisor_line else "-"}
        evidence = {"divisor_all_reduced_at": divisor_line, "all_reduce_op": "SUM", "world_size": self.world,
                    "constant_factor_on_loss": factor, "gradient_scale_vs_global_mean": scale,
                    "ddp_averages_gradients": True, "backward_line": f"{frame.file}:{frame.line}" if frame else None}
        self.found = from_catalogue(Category.DISTRIBUTED, "distributed.loss_global_divisor", "ranks.global_divisor",
                                    fields=fields, cause_key="ranks.global_divisor.cause",
                                    next_key="ranks.global_divisor.next", evidence=evidence,
                                    frame=_frame(divisor_line) or frame, source_line=True, severity=Severity.WARNING,
                                    stage=Stage.LOSS, step=self.session.step)


def _frame(line: str | None) -> UserFrame | None:
    file, _, ln = (line or "").rpartition(":")
    return UserFrame(file, int(ln), "") if file and ln.isdigit() else None
