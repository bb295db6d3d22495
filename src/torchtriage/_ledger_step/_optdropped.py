"""A resume that restores the weights and drops the optimizer state the checkpoint holds (session 18).

The invariant: a checkpoint read back to resume a run hands its optimizer state to the optimizer
that trains on. A resume that loads `ckpt['state_dict']` into the model and builds a fresh
optimizer (`optimizer` argument accepted and ignored, `optimizer.load_state_dict` forgotten)
raises nothing: momentum / Adam's moments and step count restart from zero and the learning rate
goes back to its initial value while the epoch counter carries on.

Judged only on a resume this run proves: the file was written by this run, its weights reached a
model (`CheckpointWatch._restored`), it holds an optimizer state dict (`state` with per-parameter
entries, `param_groups`) that no `Optimizer.load_state_dict` received, an optimizer that had never
stepped before the restore (a fresh one) and has as many parameters as the saved state's groups
then steps `MIN_STEPS` times, and a later write of the same dict carries its counter on past the
restored value (the loop treats itself as a continuation: not a second training stage). Harm
measured: the saved state's entries / step count / learning rate against the fresh optimizer's at
its first step. Warning, at the model's `load_state_dict` line. Attributes and a walk of the
loaded dict's first levels, once per restore; nothing per step beyond a set lookup.
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from collections.abc import Mapping
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame

MIN_STEPS = 3
DEPTH = 3


def saved_optimizer(obj: Any, depth: int = 0) -> tuple[str, Mapping[Any, Any]] | None:
    """The first optimizer state dict (`state` with entries + `param_groups`) in a loaded object."""
    if not isinstance(obj, Mapping) or depth > DEPTH:
        return None
    state, groups = obj.get("state"), obj.get("param_groups")
    if isinstance(state, Mapping) and state and isinstance(groups, list) and groups:
        return "", obj
    for k, v in list(obj.items())[:64]:
        found = saved_optimizer(v, depth + 1) if isinstance(v, Mapping) else None
        if found is not None:
            return f"[{k!r}]{found[0]}", found[1]
    return None


def _step_of(st: Any) -> int | None:
    """A per-parameter state's step count (a number or a one-element tensor), if it has one."""
    v = st.get("step") if isinstance(st, Mapping) else None
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        v = v.item()
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _summary(sd: Mapping[Any, Any]) -> dict[str, Any]:
    state, groups = sd["state"], sd["param_groups"]
    steps = [n for st in list(state.values())[:64] if (n := _step_of(st)) is not None]
    params = sum(len(g.get("params", [])) for g in groups if isinstance(g, Mapping))
    lrs = [float(g["lr"]) for g in groups if isinstance(g, Mapping) and isinstance(g.get("lr"), (int, float))]
    return {"states": len(state), "params": params, "step": max(steps) if steps else None,
            "lr": lrs[0] if lrs else None}


@dataclasses.dataclass(eq=False)
class _Dropped:
    path: str
    key: str
    frame: UserFrame | None
    read: UserFrame | None
    saved: dict[str, Any]
    scalars: dict[str, int]
    step: int
    opt: weakref.ref[torch.optim.Optimizer] | None = None
    kind: str = ""
    lr: float | None = None
    states_at_first_step: int = 0
    steps: int = 0
    continued: str | None = None


class DroppedOptimizer:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.pending: tuple[Any, _Dropped] | None = None  # (the Loaded, its record) until the next step
        self.dropped: list[_Dropped] = []
        self.seen: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()

    def restored(self, ld: Any, frame: UserFrame | None, scalars: dict[str, Any]) -> None:
        """A checkpoint this run wrote reached a model (`ld`: `_resume.Loaded`)."""
        if not ld.written_here or ld.optimizer_restored:
            return
        found = saved_optimizer(ld.obj)
        if found is None:
            return
        ints = {k: v for k, v in scalars.items() if isinstance(v, int)}
        self.pending = (ld, _Dropped(ld.path, found[0], frame, ld.frame, _summary(found[1]), ints,
                                     self.session.step))

    def saved(self, values: dict[str, float | int], hist: list[dict[str, float | int]]) -> None:
        """A write of a dict with these scalar entries (`hist`: the earlier writes of its layout)."""
        for d in self.dropped:
            if d.continued is not None or d.opt is None:
                continue
            for k, v0 in d.scalars.items():
                v = values.get(k)
                series = [h[k] for h in hist if k in h]
                if isinstance(v, int) and v > v0 and len(series) >= 2 and \
                        all(b > a for a, b in zip(series, series[1:])):
                    d.continued = f"'{k}' {v0} restored, {v} written"
                    break

    def stepped(self, opt: torch.optim.Optimizer) -> None:
        """After an optimizer step the step ledger sees (every step while it watches, sampled later)."""
        if self.pending is not None:  # the first step after the restore: the optimizer's load came before
            ld, d = self.pending
            self.pending = None
            if not ld.optimizer_restored and len(self.dropped) < 8:
                self.dropped.append(d)
        new = opt not in self.seen
        if new:
            self.seen.add(opt)
        for d in self.dropped:
            if d.opt is None and new:
                params = sum(len(g["params"]) for g in opt.param_groups)
                if params == d.saved["params"]:
                    d.opt = weakref.ref(opt)
                    d.kind = type(opt).__name__
                    lr = opt.param_groups[0].get("lr") if opt.param_groups else None
                    d.lr = float(lr) if isinstance(lr, (int, float)) else None
                    d.states_at_first_step = max((n for st in list(opt.state.values())[:64]
                                                  if (n := _step_of(st)) is not None), default=0)
            if d.opt is not None and d.opt() is opt:
                d.steps += 1

    def end(self) -> list[Finding]:
        out = []
        for d in self.dropped:
            steps = max(d.steps, self.session.step - d.step)  # (the ledger samples steps after its first ones)
            if d.opt is None or steps < MIN_STEPS or d.continued is None:
                continue
            s = d.saved
            differs = []
            if s["step"] is not None and s["step"] > max(d.states_at_first_step, 1):
                differs.append(f"step count {s['step']} saved, {d.states_at_first_step or 1} at its first step")
            if s["lr"] is not None and d.lr is not None and abs(s["lr"] - d.lr) > 1e-12 * max(abs(s["lr"]), 1e-30):
                differs.append(f"learning rate {s['lr']:g} saved, {d.lr:g} used")
            if not differs and s["step"] is not None:
                continue  # (the saved state is no further on than a fresh one: nothing lost)
            if not differs:
                differs.append(f"{s['states']} per-parameter states saved, none restored")
            name = os.path.basename(d.path) or "?"
            read = f"{os.path.basename(d.read.file)}:{d.read.line}" if d.read is not None else "?"
            fields = {"opt": d.kind, "file": name, "key": d.key or "(top level)", "states": s["states"],
                      "steps": steps, "differs": "; ".join(differs), "read": read}
            evidence = {"checkpoint": d.path, "read_at": read, "optimizer_state_in_checkpoint": d.key or "(top level)",
                        "saved_states": s["states"], "saved_step": s["step"], "saved_lr": s["lr"],
                        "live_optimizer": d.kind, "live_lr_at_first_step": d.lr,
                        "live_step_at_first_step": d.states_at_first_step, "steps_after_resume": steps,
                        "optimizer_load_state_dict_called": False, "loop_continued": d.continued,
                        "harm": "; ".join(differs)}
            out.append(from_catalogue(
                Category.OTHER, "other.optimizer_not_resumed", "ledger.optimizer_not_resumed", fields=fields,
                cause_key="ledger.optimizer_not_resumed.cause", next_key="ledger.optimizer_not_resumed.next",
                frame=d.frame, source_line=d.frame is not None, evidence=evidence, severity=Severity.WARNING,
                stage=Stage.OPTIMIZER, step=d.step, op="load_state_dict"))
        self.dropped.clear()
        return out
