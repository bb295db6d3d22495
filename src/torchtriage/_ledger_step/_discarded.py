"""Backward passes whose gradient was reset before any optimizer step applied it (session 8).

A `backward()` puts its gradient into the `.grad` of the parameters it reaches. That gradient
does something only if an optimizer step reads it before something resets it. Every backward
pass of a judged step is followed from its end until either

  * applied: an optimizer holding one of the parameters it reached steps while that parameter
    still holds the `.grad` the pass accumulated into (a GradScaler's offered step counts; a
    pass run inside `optimizer.step(closure)` belongs to that optimizer and is not followed);
  * discarded: every followed parameter's `.grad` was reset (`zero_grad()`, set to None,
    replaced) before that, while no parameter it reached changed (a SAM-like first step moves
    the weights with the gradient, then resets it: that gradient was used);
  * undecided: still held when the session ends, or when it is followed for more than a few steps.

A finding is one backward line whose passes were both applied and discarded over the judged
steps: the same line trains on some batches and throws the others' gradient away
(`zero_grad()` before every `backward()` while `step()` runs every k-th batch: gradient
accumulation that keeps only the last micro-batch). A backward line that is never applied (a
saliency map, a gradient read for logging, SAM's first pass) has no such evidence and stays
quiet, and so does a GAN's generator pass, which also fills the discriminator's `.grad` that the
next discriminator step resets: the generator's own parameters applied it. At least two
discarded passes, a fifth of that line's passes or more (a rare skipped batch is a choice).
A norm gate is a choice too: when the user's `clip_grad_norm_` measured every pass of the line
and every discarded pass's norm is above every applied one's (the loop skips the step when the
norm exceeds a limit, or is not finite), the gradients were read and rejected, not lost; an
accumulation loop that clips each micro-batch mixes the two and is still found. The norms are
the clip's own result tensors, read once, when the line is judged at the end.

Cost, on judged steps only: per backward, a version/identity read of at most `_SAMPLE`
parameters per optimizer before and after it; per `zero_grad` while a pass is pending, one set
of the reset tensors' ids. No kernel, no device read.
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack
from .._zerograd import on_zero_grad
from ._spilled import SpillWatch

_SAMPLE = 32  # parameters followed per optimizer (strided over its groups)
_MAX_AGE = 3  # steps a pass is followed before it is left undecided
MIN_DISCARDED = 2
MIN_SHARE = 0.2
_NORMS = 256  # norms kept per line and outcome


@dataclasses.dataclass
class Pass:
    """One backward from its end until applied or discarded."""

    step: int
    site: str
    frame: UserFrame | None
    params: dict[int, tuple[weakref.ref[torch.Tensor], int, int]]  # id -> (ref, id(grad), param version)
    reset: UserFrame | None = None
    norm: torch.Tensor | None = None  # the user's clip_grad_norm_ result over this pass's gradient


@dataclasses.dataclass
class Site:
    """A backward line's passes over the judged steps."""

    frame: UserFrame | None
    applied: int = 0
    discarded: int = 0
    used: int = 0  # reset after the parameters moved with it (a custom update)
    first_discard: int | None = None
    resets: dict[str, UserFrame] = dataclasses.field(default_factory=dict)
    optimizers: set[str] = dataclasses.field(default_factory=set)
    norms: dict[str, list[torch.Tensor | None]] = dataclasses.field(
        default_factory=lambda: {"applied": [], "discarded": []})

    def note(self, kind: str, ps: Pass) -> None:
        if len(self.norms[kind]) < _NORMS:
            self.norms[kind].append(ps.norm)

    def gated(self) -> bool:
        """Every discarded pass's measured norm above every applied one's: a norm gate."""
        applied, discarded = self.norms["applied"], self.norms["discarded"]
        if not applied or not discarded or any(n is None for n in applied + discarded):
            return False
        values = torch.stack([n.detach().float().reshape(()) for n in applied + discarded]).cpu()  # type: ignore[union-attr]
        values = values.nan_to_num(nan=float("inf"))
        return bool(values[len(applied):].min() > values[:len(applied)].max())


def _at(frame: UserFrame | None) -> str:
    return f"{frame.file}:{frame.line}" if frame is not None else "?"


def _short(frame: UserFrame | None) -> str:
    return f"{os.path.basename(frame.file)}:{frame.line}" if frame is not None else "?"


class DiscardWatch:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.pending: list[Pass] = []
        self.sites: dict[str, Site] = {}
        self._sample: dict[int, tuple[tuple[int, ...], list[weakref.ref[torch.Tensor]]]] = {}
        self._before: dict[int, tuple[int | None, int]] = {}
        self._in_step = 0
        self.spills = SpillWatch(session)  # a pass's gradient left in another optimizer's .grad

    # ------------------------------------------------------------------ helpers
    def _followed(self) -> list[torch.Tensor]:
        out: list[torch.Tensor] = []
        for opt in self.session.optimizers:
            sig = tuple(len(g["params"]) for g in opt.param_groups)
            hit = self._sample.get(id(opt))
            if hit is None or hit[0] != sig:
                params = [p for g in opt.param_groups for p in g["params"] if isinstance(p, torch.Tensor)]
                stride = max(1, len(params) // _SAMPLE)
                hit = (sig, [weakref.ref(p) for p in params[::stride][:_SAMPLE]])
                self._sample[id(opt)] = hit
            out += [p for r in hit[1] if (p := r()) is not None]
        return out

    @staticmethod
    def _grad_key(p: torch.Tensor) -> tuple[int | None, int]:
        g = p.grad
        return (id(g), g._version) if g is not None else (None, -1)

    def _settle(self, frame: UserFrame | None = None) -> None:
        """Passes whose followed `.grad`s are all gone are discarded (or used)."""
        for ps in list(self.pending):
            for pid, (ref, gid, _) in list(ps.params.items()):
                p = ref()
                if p is None or p.grad is None or id(p.grad) != gid:
                    self._drop(ps, pid, frame)
            if ps in self.pending and not ps.params:
                self._discard(ps)

    def _drop(self, ps: Pass, pid: int, frame: UserFrame | None) -> None:
        ref, _, version = ps.params.pop(pid)
        p = ref()
        if p is not None and p._version != version:
            ps.reset = None
            ps.params.clear()
            self.pending.remove(ps)
            self.sites[ps.site].used += 1  # the weights moved with this gradient: it was used
            return
        if frame is not None and ps.reset is None:
            ps.reset = frame

    def _discard(self, ps: Pass) -> None:
        self.pending.remove(ps)
        site = self.sites[ps.site]
        site.discarded += 1
        site.note("discarded", ps)
        if site.first_discard is None:
            site.first_discard = ps.step
        if ps.reset is not None:
            site.resets.setdefault(_at(ps.reset), ps.reset)

    # ------------------------------------------------------------------ events
    def step_begin(self, step: int) -> None:
        self._in_step = 0  # (a step() that raised never reached its post-hook)
        self.pending = [ps for ps in self.pending if step - ps.step <= _MAX_AGE]

    def backward_begin(self) -> None:
        self._settle()
        self._before = {}
        if self._in_step:
            return  # a closure's evaluation inside optimizer.step(): the optimizer's own
        self.spills.backward_begin()
        self._before = {id(p): self._grad_key(p) for p in self._followed()}

    def backward_end(self, step: int) -> None:
        if not self._in_step:
            self.spills.backward_end()
        before, self._before = self._before, {}
        if not before:
            return
        params = {}
        for p in self._followed():
            key = before.get(id(p))
            now = self._grad_key(p)
            if key is not None and now[0] is not None and now != key:
                params[id(p)] = (weakref.ref(p), now[0], p._version)
        if not params:
            return
        frame = user_frame_from_stack(3)
        site = _at(frame)
        self.sites.setdefault(site, Site(frame))
        self.pending.append(Pass(step, site, frame, params))

    def zero_grad(self, params: Any) -> None:
        """A `zero_grad()` (of an optimizer or a module) is about to reset these tensors' grads."""
        if not self.pending and not self.spills.active:
            return
        ids = {id(p) for p in params}
        self.spills.reset(ids)
        if not self.pending:
            return
        frame: UserFrame | None = None
        for ps in list(self.pending):
            hit = [pid for pid in ps.params if pid in ids]
            if not hit:
                continue
            frame = frame or user_frame_from_stack(3)
            for pid in hit:
                if ps in self.pending:
                    self._drop(ps, pid, frame)
            if ps in self.pending and not ps.params:
                self._discard(ps)

    def consumed(self, params: Any) -> None:
        """The optimizer reset these grads inside one of its own methods: it read them (used)."""
        ids = {id(p) for p in params}
        for ps in list(self.pending):
            if any(pid in ids for pid in ps.params):
                self.pending.remove(ps)
                self.sites[ps.site].used += 1

    def optimizer_step(self, opt: torch.optim.Optimizer) -> None:
        self._settle()
        step = self.session.step
        self.spills.stepped(opt, step)
        if not self.pending:
            return
        held = {id(p) for g in opt.param_groups for p in g["params"]}
        for ps in list(self.pending):
            for pid, (ref, gid, _) in ps.params.items():
                p = ref()
                if pid in held and p is not None and p.grad is not None and id(p.grad) == gid:
                    self.pending.remove(ps)
                    site = self.sites[ps.site]
                    site.applied += 1
                    site.note("applied", ps)
                    site.optimizers.add(type(opt).__name__)
                    self.spills.pass_applied(ps.params, opt, ps.frame, step)
                    break

    def wanted(self) -> bool:
        return bool(self.pending)

    def clipped(self, params: list[Any], result: Any) -> None:
        """The user's clip over `params` returned `result` (a norm tensor for clip_grad_norm_)."""
        if not isinstance(result, torch.Tensor) or result.numel() != 1:
            return
        ids = {id(p) for p in params}
        for ps in self.pending:
            if ps.norm is None and any(pid in ids for pid in ps.params):
                ps.norm = result

    def step_entered(self) -> None:
        self._in_step += 1

    def step_left(self) -> None:
        self._in_step = max(0, self._in_step - 1)

    # ------------------------------------------------------------------ judging
    def end(self) -> list[Finding]:
        self._settle()
        out = self.spills.findings()
        for site in self.sites.values():
            total = site.applied + site.discarded
            if not site.applied or site.discarded < MIN_DISCARDED or site.discarded < MIN_SHARE * total:
                continue
            if site.gated():
                continue
            reset = next(iter(site.resets.values()), None)
            frame = reset or site.frame
            evidence: dict[str, Any] = {
                "backward_line": _at(site.frame), "passes": total, "applied": site.applied,
                "discarded": site.discarded, "share_discarded": round(site.discarded / total, 3),
                "first_discarded_step": site.first_discard, "optimizers": sorted(site.optimizers),
                "reset_at": sorted(site.resets) or "a new .grad (set to None or replaced)"}
            fields = {"discarded": site.discarded, "total": total, "backward": _short(site.frame),
                      "reset": _short(reset) if reset is not None else "a reset of .grad",
                      "applied": site.applied}
            out.append(from_catalogue(Category.GRADIENT, "gradient.discarded", "ledger.discarded",
                                      fields=fields, cause_key="ledger.discarded.cause",
                                      next_key="ledger.discarded.next", frame=frame, evidence=evidence,
                                      source_line=True, severity=Severity.WARNING, stage=Stage.BACKWARD,
                                      step=site.first_discard, op="zero_grad" if reset is not None else None))
        return out


def patch_zero_grad(session: Any, watch: DiscardWatch) -> None:
    """Tell `watch` about `Optimizer.zero_grad` / `Module.zero_grad` calls (`_zerograd`)."""

    def heard(obj: Any, kind: str, caller: Any) -> None:
        if not watch.pending and not watch.spills.active:
            return
        params = [p for g in obj.param_groups for p in g["params"]] if kind == "optimizer" else obj.parameters()
        if caller.f_code.co_name != "zero_grad" and isinstance(caller.f_locals.get("self"), torch.optim.Optimizer):
            # an optimizer resetting its own grads inside another of its methods (a DP
            # optimizer's microbatch step, SAM's first_step): it consumed them
            watch.consumed(params)
        else:
            watch.zero_grad(params)

    on_zero_grad(session, "step_ledger.zero_grad", heard)
