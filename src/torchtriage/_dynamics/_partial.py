"""Clipping a partial sum of accumulated gradients: every micro-batch of a step must enter its
update with the same weight.

With gradient accumulation a step's gradient is the sum of its micro-batches' gradients, and a
clip belongs after the last of them (`if accelerator.sync_gradients:`, `if (i + 1) % k == 0:`).
A `clip_grad_norm_` that runs between two backward calls of one optimizer step rescales the
partial sum whenever its norm exceeds `max_norm`; the micro-batches after it are added at full
weight, so the earlier ones are shrunk by the product of every later partial clip's factor
`min(1, max_norm / norm)` (and the step's final clip, if any, acts on that distorted sum).

Judged on `StepOrder`'s tracked steps (the sampled ones): a clip with at least one backward of
the same step before it and one after it, whose clipped parameters' gradients that later
backward then changed (the `.grad` tensor replaced, or its version counter moved: autograd
accumulates in place). A clip of one model's gradients followed by another model's backward (two
losses, two parameter sets, one optimizer) leaves those gradients alone: quiet. The norm each
partial clip returned rides the dynamics check's deferred read; the micro-batches' weights
relative to the step's last one are the harm, a warning when one of them is below `LOW`
(the clip really rescaled), else an info (the clip never bit, yet). Reported after two such
steps, at the session's end.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage
from .._frames import UserFrame
from ._common import finding

PROBES = 16  # gradients probed per clip
LOW = 0.95  # a micro-batch entering at under this weight (relative to the last one) was rescaled
MIN_STEPS = 2


@dataclass
class _Clip:
    at: int  # backward calls of the step before it
    norm: Any  # what clip_grad_norm_ returned (the partial sum's norm)
    max_norm: float | None
    frame: UserFrame | None
    probes: list[tuple[weakref.ref[torch.Tensor], int, int]]  # (param, id(grad), grad._version) after the clip
    added: bool | None = None  # a later backward changed those gradients
    through: bool = False  # a backward began with those gradients as the clip left them


@dataclass
class PartialClips:
    clips: list[_Clip] = field(default_factory=list)  # this step's
    steps: int = 0  # tracked steps with a partial clip
    weights: list[tuple[int, list[float]]] = field(default_factory=list)  # (step, micro-batch weights)
    counts: tuple[int, int] = (0, 0)  # (backwards per step, partial clips per step) of the first such step
    frame: UserFrame | None = None
    max_norm: float | None = None
    first_step: int | None = None

    def reset(self) -> None:
        self.clips = []

    def before_clip(self) -> None:
        self.settle()

    def backward(self) -> None:
        """A backward call begins: the last clip's gradients, if something else wrote them since
        (a reset, `p.grad.zero_()` in DP-SGD's per-sample loop), were no partial sum."""
        if self.clips and self.clips[-1].added is None and not self.clips[-1].through:
            c = self.clips[-1]
            if _changed(c):
                c.added = False
            else:
                c.through = True

    def clipped(self, at: int, params: list[Any], norm: Any, max_norm: float | None,
                frame: UserFrame | None) -> None:
        probes = []
        for p in params[:PROBES]:
            g = getattr(p, "grad", None)
            if isinstance(g, torch.Tensor):
                probes.append((weakref.ref(p), id(g), g._version))
        self.clips.append(_Clip(at, norm, max_norm, frame, probes))

    def settle(self) -> None:
        """The last clip's gradients: did a backward add to them? (At the next clip, the step, or a
        `zero_grad`, before it runs.)"""
        if self.clips and self.clips[-1].added is None:
            c = self.clips[-1]
            c.added = c.through and _changed(c)

    def step(self, step: int, backwards: int, defer: Any) -> None:
        """At an optimizer step of a tracked step: queue the partial clips' norms for the read."""
        self.settle()
        partial = [c for c in self.clips if 0 < c.at < backwards and c.added]
        self.clips = []
        if not partial or any(not isinstance(c.norm, torch.Tensor) or c.norm.numel() != 1 for c in partial):
            return
        self.steps += 1
        if self.frame is None:
            self.frame, self.max_norm, self.first_step = partial[0].frame, partial[0].max_norm, step
            self.counts = (backwards, len(partial))
        if len(self.weights) >= 8:
            return
        ats = [c.at for c in partial]
        maxes = [c.max_norm for c in partial]

        def done(norms: list[float]) -> None:
            factors = [min(1.0, m / (n + 1e-6)) if m is not None and n == n else 1.0 for n, m in zip(norms, maxes)]
            weights = []
            for j in range(1, backwards + 1):  # micro-batch j's weight: every partial clip at or after it
                w = 1.0
                for at, f in zip(ats, factors):
                    if at >= j:
                        w *= f
                weights.append(round(w, 4))
            self.weights.append((step, weights))

        defer([c.norm.detach().reshape(()).float() for c in partial], done)

    def finding(self) -> Finding | None:
        if self.steps < MIN_STEPS or self.frame is None:
            return None
        backwards, clips = self.counts
        worst_step, worst = min(self.weights, key=lambda sw: min(sw[1]), default=(self.first_step, []))
        low = min(worst) if worst else 1.0
        harmful = low < LOW
        evidence: dict[str, Any] = {
            "backward_calls_per_step": backwards, "clips_between_backwards_per_step": clips,
            "max_norm": self.max_norm, "steps_seen_like_this": self.steps,
            "micro_batch_weights": worst, "at_step": worst_step,
        }
        if harmful:
            evidence["harm"] = (f"at step {worst_step} the first micro-batch entered the update at {low:.3g}× the "
                                f"weight of the last one (weights {worst})")
        return finding("clip_partial_accumulation", category=Category.GRADIENT, stage=Stage.BACKWARD,
                       severity=Severity.WARNING if harmful else Severity.INFO, step=self.first_step,
                       frame=self.frame, op="clip_grad_norm_", backwards=backwards, clips=clips,
                       weight=f"{low:.3g}", max_norm=self.max_norm,
                       cause="dynamics.clip_partial_accumulation.cause" + ("" if harmful else ".quiet"),
                       evidence=evidence)


def _changed(c: _Clip) -> bool:
    """A probed gradient is another tensor now, or was written in place, since the clip."""
    for ref, gid, version in c.probes:
        p = ref()
        g = getattr(p, "grad", None) if p is not None else None
        if g is not None and (id(g) != gid or g._version != version):
            return True
    return False
