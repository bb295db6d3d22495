"""Gradient clipping that misses the parameters the optimizer steps (session 19).

A `clip_grad_norm_(params, max_norm)` between a step's last backward and `optimizer.step()`
says: the gradient this step applies has norm at most `max_norm`. That holds only for the
parameters the clip was given; the invariant is that the optimizer stepped next holds them. A
clip of another module's parameters (the value head clipped before the policy optimizer's
step, `minimize(model_a, opt_b, loss)`) leaves every gradient that step applies unclipped.

Judged on `StepOrder`'s tracked steps: the clips since the step's last backward (all of them:
one clip of every model before several optimizers' steps covers them all) against the
parameters of the stepped optimizer that hold a gradient. A step none of whose gradient-holding
parameters any of those clips was given is a miss; the total norm of that optimizer's gradients
rides the dynamics check's deferred read. Verdict at the end, per optimizer, after `MIN_MISSES`
misses that were all its clipped steps: a warning when on most of the read misses that norm was
above the clip's `max_norm` (the clip, had it reached them, would have scaled the step down),
an info when it seldom was. Quiet: a clip that shares one parameter with the optimizer (a shared
trunk clipped with one head), a clip of infinite `max_norm` (a norm measurement), no clip.
"""

from __future__ import annotations

import math
import statistics
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage
from .._frames import UserFrame
from ._common import finding, num
from ._layers import grad_params

MIN_MISSES = 3
MAX_READS = 256


@dataclass
class _Clip:
    ids: set[int]
    names: list[Any]  # weak refs to a few of the clipped tensors (named at the end)
    max_norm: float
    frame: UserFrame | None


@dataclass
class _Opt:
    ref: weakref.ref[Any]
    kind: str
    clipped_steps: int = 0
    misses: int = 0
    first_step: int | None = None
    clip: _Clip | None = None
    stepped: list[Any] = field(default_factory=list)  # weak refs to a few of its gradient-holding tensors
    norms: list[tuple[float, float]] = field(default_factory=list)  # (norm applied, max_norm), read


class ClipTargets:
    """Per optimizer: its steps after a clip, and those whose parameters no clip was given."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.clips: list[_Clip] = []
        self.opts: dict[int, _Opt] = {}

    def clipped(self, params: list[Any], max_norm: float | None, frame: UserFrame | None) -> None:
        if max_norm is None or not math.isfinite(max_norm) or max_norm <= 0 or len(self.clips) >= 16:
            return
        tensors = [p for p in params if isinstance(p, torch.Tensor)]
        self.clips.append(_Clip({id(p) for p in tensors}, [weakref.ref(p) for p in tensors[:4]], max_norm, frame))

    def backward(self) -> None:
        self.clips = []

    def stepped(self, opt: Any, step: int, defer: Any) -> None:
        if not self.clips:
            return
        t = self.opts.get(id(opt))
        if t is None or t.ref() is not opt:
            if len(self.opts) >= 16:
                return
            t = self.opts[id(opt)] = _Opt(weakref.ref(opt), type(opt).__name__)
        params = grad_params(opt)
        if not params:
            return
        t.clipped_steps += 1
        if any(id(p) in c.ids for c in self.clips for p in params):
            return
        t.misses += 1
        clip = self.clips[-1]
        if t.clip is None:
            t.clip, t.first_step = clip, step
            t.stepped = [weakref.ref(p) for p in params[:4]]
        if defer is not None and len(t.norms) < MAX_READS:
            grads = [p.grad.detach().float() for p in params if p.grad is not None]
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g).to(grads[0].device)
                                                         for g in grads]))
            defer([norm], lambda v, m=clip.max_norm, t=t: t.norms.append((v[0], m)) if v and v[0] == v[0] else None)

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        for t in self.opts.values():
            if t.misses < MIN_MISSES or t.misses != t.clipped_steps or t.clip is None:
                continue
            clip = t.clip
            read = len(t.norms)
            bit = sum(1 for v, m in t.norms if v > m * (1 + 1e-6))
            median = statistics.median(v for v, _ in t.norms) if t.norms else None
            harm = read > 0 and 2 * bit > read
            clipped = self._names(clip.names)
            stepped = self._names(t.stepped)
            ev: dict[str, Any] = {"optimizer": t.kind, "max_norm": num(clip.max_norm),
                                  "clipped_parameters": clipped, "stepped_parameters": stepped,
                                  "steps_after_a_clip": t.clipped_steps, "steps_clip_missed": t.misses,
                                  "steps_with_norm_read": read, "steps_norm_above_max_norm": bit,
                                  "median_norm_applied": num(median),
                                  "max_norm_applied": num(max(v for v, _ in t.norms)) if t.norms else "n/a"}
            if harm:
                ev["harm"] = (f"on {bit}/{read} steps {t.kind} applied an unclipped gradient of norm above "
                              f"max_norm {num(clip.max_norm)} (median {num(median)})")
            out.append(finding(
                "clip_misses_optimizer", category=Category.GRADIENT,
                severity=Severity.WARNING if harm else Severity.INFO, stage=Stage.BACKWARD, step=t.first_step,
                frame=clip.frame, op="clip_grad_norm_", module=t.kind,
                parameter=", ".join(clipped[:2]) or None, optimizer=t.kind, max_norm=num(clip.max_norm),
                clipped=", ".join(clipped[:3]) or "?", stepped=", ".join(stepped[:3]) or "?",
                misses=t.misses, read=read, bit=bit, median=num(median), evidence=ev))
        self.opts.clear()
        return out

    def _names(self, refs: list[Any]) -> list[str]:
        out = []
        for r in refs:
            p = r()
            name = self.session.param_index.name(p) if p is not None else None
            out.append(name or (f"tensor{tuple(p.shape)}" if p is not None else "?"))
        return out
