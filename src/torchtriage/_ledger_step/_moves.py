"""Parameters an optimizer moves although they are frozen (issue 26, parameter updates).

An optimizer skips a parameter whose `.grad` is None, not one whose `requires_grad` is off.
Freezing a layer in the middle of training (`requires_grad_(False)` for a second stage) while
its `.grad` is still a tensor — `zero_grad(set_to_none=False)` keeps zeros there, a grad left
from the last backward stays — lets the optimizer go on moving it: momentum, Adam's running
averages and decoupled weight decay change it at every step, with no gradient at all.

At each judged `optimizer.step()` the tensors it holds with `requires_grad=False` and a `.grad`
are noted with their version counters (an in-place update bumps it); after the step, a bumped
counter is a parameter that moved although it is frozen. No kernel, no sync: attributes only.

(Session 17) A frozen tensor whose `.grad` is None is skipped by torch's optimizers; an optimizer
that does not skip it (one that fills a missing grad with zeros "for synchronization", then
applies momentum and `p.mul_(1 - lr * wd)`) moves it anyway. Its version counter is noted too;
a bump is only a suspect (an in-place `add_` of zeros bumps it without a change): a sample of
its values (at most `SAMPLE` elements) is taken after that step, and at the run's end (one
read) the tensors whose sampled values changed since are the finding, with how far they moved.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from .._deferred import read_scalars
from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack

_SETTINGS = ("weight_decay", "momentum", "betas")
SAMPLE = 32
MAX_TRACKED = 64  # frozen tensors without a grad whose values are sampled, per run


class FrozenMoves:
    def __init__(self, session: Any) -> None:
        self.session = session
        self._before: dict[int, list[tuple[weakref.ref[torch.Tensor], int, int]]] = {}
        self._gradless: dict[int, list[tuple[weakref.ref[torch.Tensor], int, int]]] = {}
        self.reported: set[int] = set()
        # id(tensor) -> (tensor, sample index, sampled values after its first bump, group, optimizer, step, frame)
        self.tracked: dict[int, tuple[weakref.ref[torch.Tensor], torch.Tensor, torch.Tensor, int, str, int,
                                      UserFrame | None, dict[str, Any]]] = {}

    def pre(self, opt: torch.optim.Optimizer) -> None:
        if id(opt) in self.reported:
            return
        noted: list[tuple[weakref.ref[torch.Tensor], int, int]] = []
        gradless: list[tuple[weakref.ref[torch.Tensor], int, int]] = []
        for gi, g in enumerate(opt.param_groups):
            for p in g["params"]:
                if isinstance(p, torch.Tensor) and not p.requires_grad:
                    (noted if p.grad is not None else gradless).append((weakref.ref(p), p._version, gi))
        if noted:
            self._before[id(opt)] = noted
        if gradless and len(self.tracked) < MAX_TRACKED:
            self._gradless[id(opt)] = gradless

    def post(self, opt: torch.optim.Optimizer) -> None:
        self._gradless_post(opt)
        noted = self._before.pop(id(opt), None)
        if not noted:
            return
        moved = [(p, gi) for ref, v, gi in noted if (p := ref()) is not None and p._version != v]
        if not moved:
            return
        self.reported.add(id(opt))
        sess = self.session
        index = sess.param_index
        names = [index.name(p) or "?" for p, _ in moved]
        first, gi = moved[0]
        info = index.info(first)
        group = opt.param_groups[gi]
        settings = {k: group[k] for k in _SETTINGS if k in group and group[k]}
        grad = first.grad
        zero_grad = bool(grad is not None and grad.numel() and grad.device.type == "cpu" and not grad.any())
        evidence: dict[str, Any] = {
            "parameters": names[:8], "count": len(moved), "requires_grad": False,
            "grad": "a tensor" + (" of zeros" if zero_grad else ""), "optimizer": type(opt).__name__,
            "group": gi, "values_changed_by_step": True, **{k: str(v) for k, v in settings.items()}}
        if info is not None and info.label:
            evidence["model"] = info.label
        fields = {"count": len(moved), "first": names[0], "opt": type(opt).__name__, "step": sess.step,
                  "settings": ", ".join(f"{k}={v}" for k, v in settings.items()) or "its state"}
        sess.add(from_catalogue(Category.GRADIENT, "gradient.frozen_moved", "ledger.frozen_moved", fields=fields,
                                cause_key="ledger.frozen_moved.cause", next_key="ledger.frozen_moved.next",
                                evidence=evidence, severity=Severity.WARNING, stage=Stage.OPTIMIZER, step=sess.step,
                                module=info.module if info is not None else None, parameter=names[0]))

    # ------------------------------------------------------------------ frozen, no grad
    def _gradless_post(self, opt: torch.optim.Optimizer) -> None:
        noted = self._gradless.pop(id(opt), None)
        if not noted:
            return
        bumped = [(p, gi) for ref, v, gi in noted if (p := ref()) is not None and p._version != v
                  and id(p) not in self.tracked and p.is_floating_point() and p.numel()
                  and p.layout is torch.strided]
        if not bumped:
            return
        frame = user_frame_from_stack(3)
        with torch.no_grad():
            for p, gi in bumped[:MAX_TRACKED - len(self.tracked)]:
                n = p.numel()
                index = torch.linspace(0, n - 1, min(n, SAMPLE), device=p.device).long()
                sample = p.detach().reshape(-1).index_select(0, index).float()
                group = opt.param_groups[gi]
                settings = {k: group[k] for k in _SETTINGS if k in group and group[k]}
                self.tracked[id(p)] = (weakref.ref(p), index, sample, gi, type(opt).__name__, self.session.step,
                                       frame, settings)

    def end(self) -> list[Finding]:
        """Frozen tensors without a grad that an optimizer step bumped and whose values changed
        since (one read)."""
        rows = [(t, p) for t in self.tracked.values() if (p := t[0]()) is not None and not p.requires_grad]
        self.tracked.clear()
        if not rows:
            return []
        with torch.no_grad():
            diffs = [(p.detach().reshape(-1).index_select(0, t[1]).float() - t[2]).abs().max().reshape(1)
                     .to(rows[0][1].device) for t, p in rows]
            change = read_scalars([torch.cat(diffs)])
        moved = [(t, p, d) for (t, p), d in zip(rows, change) if d > 0]
        if not moved:
            return []
        sess = self.session
        index = sess.param_index
        names = [index.name(p) or "?" for _, p, _ in moved]
        t, first, _ = moved[0]
        info = index.info(first)
        biggest = max(d for _, _, d in moved)
        settings: dict[str, Any] = t[7]
        evidence: dict[str, Any] = {
            "parameters": names[:8], "count": len(moved), "requires_grad": False, "grad_before_step": None,
            "optimizer": t[4], "group": t[3], "first_moved_at_step": t[5],
            "max_change_since": float(f"{biggest:.4g}"), **{k: str(v) for k, v in settings.items()},
            "harm": f"{len(moved)} frozen tensor(s) changed by up to {biggest:.4g} after step {t[5]}"}
        if info is not None and info.label:
            evidence["model"] = info.label
        fields = {"count": len(moved), "first": names[0], "opt": t[4], "step": t[5], "change": f"{biggest:.4g}",
                  "settings": ", ".join(f"{k}={v}" for k, v in settings.items()) or "its state"}
        frame: UserFrame | None = t[6]
        return [from_catalogue(Category.GRADIENT, "gradient.frozen_moved", "ledger.frozen_moved.nograd",
                               fields=fields, cause_key="ledger.frozen_moved.nograd.cause",
                               next_key="ledger.frozen_moved.nograd.next", frame=frame, source_line=frame is not None,
                               evidence=evidence, severity=Severity.WARNING, stage=Stage.OPTIMIZER, step=t[5],
                               module=info.module if info is not None else None, parameter=names[0])]
