"""The variance of a regression loss's targets, pooled over the run's first steps.

`dynamics.loss_at_prior` compares an MSE loss with the loss of a model that predicts the mean
target: the targets' variance. Read from one batch, that variance is an estimate whose error is
of the order of the gap it must resolve (the 32 two-dimensional noise targets of a diffusion
model's first batch gave 0.71 for a true 1.0, and a loss that was learning sat at it). The
moments are pooled on the device (per-column sum and sum of squares, no read) over the MSE
calls of the first `POOL_STEPS` steps whose targets have the first call's columns, and the pooled
variance (the mean over columns) rides the step's one read, one number a step.

The prior is the level of one MSE term: a step whose backward'd loss adds several MSE calls made
with gradients (a twin critic's `mse(Q1, y) + mse(Q2, y)`) sits at a multiple of it, so such a
run gets no MSE prior (`several`). So does a run whose backward'd loss is not the MSE's own value
(session 15, `rescaled`): a per-step weight (a diffusion model's timestep weighting, an importance
weight) or any other factor moves the recorded loss off the MSE's level, and a flow-matching DiT
whose MSE was 0.87 against a constant predictor's 1.50 was called "at the targets' variance"
from its weighted loss. Over the pooled steps, each step's backward root is compared with the
step's last MSE output (the same tensor: nothing to read; else both ride the step's read).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

POOL_STEPS = 50


class TargetMoments:
    """Pooled first and second moments of the MSE targets (per column, on the device)."""

    def __init__(self) -> None:
        self.rows = 0
        self.total: torch.Tensor | None = None
        self.squares: torch.Tensor | None = None
        self.step = -1
        self.calls = 0  # MSE calls with gradients in `step`
        self.several = False  # some step's loss adds several MSE terms
        self.output: torch.Tensor | None = None  # the MSE output with gradients of `step`
        self.rescaled = False  # some step's backward'd loss is not the MSE's value

    @property
    def no_level(self) -> bool:
        """The recorded loss is not one MSE term's value: its targets' variance is no level of it."""
        return self.several or self.rescaled

    def count(self, step: int, output: Any) -> None:
        """One MSE call; two with gradients in one step make the prior no level of the loss."""
        if not (isinstance(output, torch.Tensor) and output.requires_grad):
            return
        if step != self.step:
            self.step, self.calls = step, 0
        self.calls += 1
        self.several = self.several or self.calls > 1
        self.output = output

    def backward(self, step: int, root: Any, defer: Callable[[list[torch.Tensor], Any], None]) -> None:
        """The step's backward: its root is the MSE output itself, or it must equal its value."""
        out, self.output = self.output, None
        if out is None or step != self.step or root is out:
            return
        if not (isinstance(root, torch.Tensor) and root.numel() == 1 and root.is_floating_point()):
            self.rescaled = True
            return

        def done(v: list[float]) -> None:
            a, b = v
            if not abs(a - b) <= 1e-3 * max(abs(a), abs(b)) + 1e-12:
                self.rescaled = True

        defer([root.detach().float().reshape(()), out.detach().float().reshape(())], done)

    def add(self, inp: torch.Tensor, tgt: torch.Tensor, defer: Callable[[list[torch.Tensor], Any], None],
            done: Callable[[float], None]) -> None:
        """Pool one call's targets; `done(variance)` when the step's read brings the pooled value."""
        if not (tgt.is_floating_point() and tgt.dim() >= 1 and tgt.shape[0] > 1 and tgt.shape == inp.shape):
            return
        with torch.no_grad():
            t = tgt.detach().to(torch.float64).reshape(tgt.shape[0], -1)
            if self.total is None:
                self.total, self.squares = t.sum(0), (t * t).sum(0)
            elif self.total.shape[0] == t.shape[1] and self.total.device == t.device:
                assert self.squares is not None
                self.total += t.sum(0)
                self.squares += (t * t).sum(0)
            else:
                return  # other columns: another loss's targets
            self.rows += int(t.shape[0])
            mean = self.total / self.rows
            var = (self.squares / self.rows - mean * mean).clamp_min(0).mean().to(torch.float32)
        defer([var], lambda v: done(float(v[0])))
