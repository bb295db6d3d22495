"""An optimizer's step counter that does not count its steps (session 17).

The invariant: the `step` an optimizer keeps (in each param group, `group["step"]`, or per
parameter, `state[p]["step"]`) advances by exactly one per `optimizer.step()`: it is the `t` of
Adam's bias corrections `1 - beta ** t` and of step-indexed rules. An increment written inside
the loop over the group's parameters (or twice in it) advances it by the number of tensors per
step: the bias corrections use a `t` many times too large (and different for each tensor), so
the optimizer runs with another step size than the configured one.

At each judged step the counters are kept before and after (Python numbers, or copies of CPU
scalar tensors; a counter on an accelerator is skipped): the group's and those of the first and
last tensor with a gradient. Nothing is read during the run: the copies (host memory, never a
device read) are read at its end, for the first `KEEP` steps of each optimizer. A counter
that advanced by more than one at every judged step (at least `MIN_STEPS`) is the finding.
Harm, measured for a group with Adam's `betas`: the bias-corrected step factor
`sqrt(1 - b2**t) / (1 - b1**t)` at the counter's value against the one at the number of steps
it should read, at the judged step where they differ most; a warning when it is off by `OFF`
or more, else an info.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch

from .._deferred import read_host_scalars
from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack

MIN_STEPS = 3
OFF = 0.1  # relative error of the bias-corrected step size that counts as harm
KEEP = 64  # judged steps kept per optimizer


def _kept(v: Any) -> float | torch.Tensor | None:
    """The counter's value as it is now, without reading a tensor: a number, or a copy of a
    CPU scalar tensor (the optimizer advances its own in place)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, torch.Tensor) and v.numel() == 1 and v.device.type == "cpu":
        return v.detach().clone()
    return None




def _factor(t: float, betas: tuple[float, float]) -> float:
    b1, b2 = betas
    return math.sqrt(max(0.0, 1 - b2 ** t)) / max(1e-12, 1 - b1 ** t)


class _Counter:
    def __init__(self, where: str) -> None:
        self.where = where  # "param_groups[0]['step']", "state[body.0.weight]['step']"
        self.steps = 0  # judged steps at which it advanced
        self.over = 0  # ... by more than one
        self.deltas: list[float] = []
        self.value = 0.0
        self.worst = (0.0, 0.0, 0.0)  # (relative error of the step factor, counter, steps it should read)


class StepCounters:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.opts: dict[int, tuple[weakref.ref[Any], dict[str, _Counter]]] = {}
        self.kinds: dict[int, str] = {}
        self.before: dict[int, list[tuple[str, Any, Any, Any]]] = {}
        self.frames: dict[int, UserFrame | None] = {}
        # per optimizer: (where, before, after, betas) of each judged step, read at the end
        self.kept: dict[int, list[list[tuple[str, Any, Any, Any]]]] = {}

    def _read(self, opt: torch.optim.Optimizer) -> list[tuple[str, Any, Any, Any]]:
        out: list[tuple[str, Any, Any, Any]] = []
        for gi, g in enumerate(opt.param_groups[:8]):
            betas = g.get("betas")
            betas = betas if isinstance(betas, tuple) and len(betas) == 2 and all(
                isinstance(b, float) for b in betas) else None
            v = _kept(g.get("step"))
            if v is not None:
                out.append((f"param_groups[{gi}]['step']", None, v, betas))
            held = [p for p in g["params"] if isinstance(p, torch.Tensor) and p.grad is not None]
            for p in (held[:1] + held[-1:]) if len(held) > 1 else held:
                st = opt.state.get(p) if isinstance(opt.state, dict) else None
                v = _kept(st.get("step")) if isinstance(st, dict) else None
                if v is not None:
                    name = self.session.param_index.name(p) or f"param_groups[{gi}]"
                    out.append((f"state[{name}]['step']", weakref.ref(p), v, betas))
        return out

    def step_pre(self, opt: torch.optim.Optimizer) -> None:
        if len(self.opts) >= 16 and id(opt) not in self.opts:
            return
        if len(self.kept.get(id(opt), ())) >= KEEP:
            return
        self.before[id(opt)] = self._read(opt)

    def step_post(self, opt: torch.optim.Optimizer) -> None:
        before = self.before.pop(id(opt), None)
        if not before:
            return
        entry = self.opts.get(id(opt))
        if entry is None or entry[0]() is not opt:
            entry = self.opts[id(opt)] = (weakref.ref(opt), {})
            self.kinds[id(opt)] = type(opt).__name__
            self.kept[id(opt)] = []
            self.frames[id(opt)] = user_frame_from_stack(3)
        after = {where: v for where, _, v, _ in self._read(opt)}
        self.kept[id(opt)].append([(where, v0, after[where], betas) for where, _, v0, betas in before
                                   if where in after])

    def _read_copies(self) -> None:
        """Every kept tensor copy (CPU scalars: no device read) replaced by its number."""
        copies = [v for steps in self.kept.values() for step in steps for e in step for v in e[1:3]
                  if isinstance(v, torch.Tensor)]
        values = iter(read_host_scalars(copies))
        for steps in self.kept.values():
            for step in steps:
                step[:] = [(w, *(next(values) if isinstance(v, torch.Tensor) else v for v in (r0, r1)), b)
                           for w, r0, r1, b in step]

    def _judge(self, key: int) -> dict[str, _Counter]:
        counters: dict[str, _Counter] = {}
        for step in self.kept.get(key, ()):
            for where, r0, r1, betas in step:
                v0, v1 = float(r0), float(r1)  # (numbers: `end` read the copies)
                if v1 <= v0:
                    continue  # (a tensor without a gradient this step; a counter reset)
                c = counters.setdefault(where, _Counter(where))
                d = v1 - v0
                c.steps += 1
                c.deltas.append(d)
                c.value = v1
                if d > 1:
                    c.over += 1
                    if betas is not None:
                        should = max(1.0, v1 / d)  # the steps it would read, had it advanced by one each time
                        err = abs(_factor(v1, betas) / _factor(should, betas) - 1)
                        if err > c.worst[0]:
                            c.worst = (err, v1, should)
        return counters

    def end(self) -> list[Finding]:
        out = []
        self._read_copies()
        for key in self.opts:
            counters = self._judge(key)
            bad = [c for c in counters.values() if c.steps >= MIN_STEPS and c.over == c.steps]
            if not bad:
                continue
            kind = self.kinds.get(key, "optimizer")
            c = max(bad, key=lambda c: c.worst[0])
            err, t, should = c.worst
            harm = err >= OFF
            per = sorted(set(c.deltas))
            evidence: dict[str, Any] = {
                "optimizer": kind, "counter": c.where, "counters": [b.where for b in bad][:4],
                "judged_steps": c.steps, "advance_per_step": per[:4], "last_value": c.value}
            if harm:
                evidence["harm"] = (f"at counter {t:g} (about {should:g} steps) the bias-corrected step size is off by "
                                    f"{err:.0%} from the one for the true step count")
                evidence["step_size_error"] = round(err, 3)
            fields = {"opt": kind, "counter": c.where, "per": "/".join(f"{d:g}" for d in per[:3]),
                      "steps": c.steps, "value": f"{c.value:g}"}
            frame = self.frames.get(key)
            out.append(from_catalogue(
                Category.SILENT, "silent.step_counter", "ledger.step_counter", fields=fields,
                cause_key="ledger.step_counter.cause", next_key="ledger.step_counter.next", frame=frame,
                source_line=frame is not None, evidence=evidence,
                severity=Severity.WARNING if harm else Severity.INFO, stage=Stage.OPTIMIZER,
                step=self.session.step, op=kind, module=kind))
        self.opts.clear()
        self.kept.clear()
        return out
