"""An optimizer re-created over the same parameters, again and again: its state restarts each time.

What an optimizer keeps between steps (Adam's moment estimates and step count, SGD's momentum
buffers) is part of the run: every correct loop keeps one optimizer per set of parameters for
as long as they train together. A function that trains one epoch and builds its optimizer
inside (`opt = Adam(model.parameters())` when none is passed) throws that state away at every
call, and each epoch restarts with bias-corrected first steps of about `lr` per element,
whatever the gradients' history.

A *lineage* is the optimizers of one class over one set of parameter tensors (the same
objects, in the same order). A new optimizer continues a lineage when its first step comes
after the one before it stepped, with the one before no longer stepping, nothing having written
the parameters in between (their version counters as the last step left them: a re-initialized
model for the next fold is a new run), the same lr, and its own state empty (a state loaded
from the one before is a resume). The one before must have held state (tensors in
`optimizer.state`: plain SGD keeps none, and re-creating it loses nothing). Two such rebuilds
or more are the finding; an optimizer stepped again after its successor started (two
optimizers alternating over one model) ends the lineage's judgement.

The harm is read off the loss the run recorded: the mean of the few losses after each rebuild
against the few before it. A warning when the loss rose across most rebuilds (the restart
undid progress the run had made), else an info. Attributes only at each step (one dict lookup,
the first parameter's state keys at the step's end); no device read.
"""

from __future__ import annotations

import statistics
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage
from .._frames import UserFrame, optimizer_frame
from ._common import finding, num

MIN_REBUILDS = 2
PROBE = 4  # parameters whose version counters tell a re-initialization
WINDOW = 8  # losses before / after a rebuild
SLICE = 4096  # elements of one parameter whose update is measured once a rebuild was seen
JUMP = 2.0  # the first update of a new optimizer against the last of the one before: harm


def _params(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for g in opt.param_groups for p in g["params"] if isinstance(p, torch.Tensor)]


def _state_tensors(opt: torch.optim.Optimizer, p: torch.Tensor) -> list[str]:
    st = opt.state.get(p) if hasattr(opt.state, "get") else None
    if not isinstance(st, dict):
        return []
    return sorted(k for k, v in st.items() if isinstance(v, torch.Tensor) and k != "step"
                  or k == "step" and v is not None)


@dataclass
class Lineage:
    kind: str
    lr: Any
    params: list[weakref.ref[torch.Tensor]]  # the first PROBE tensors
    count: int
    current: weakref.ref[torch.optim.Optimizer]
    steps: int = 0
    state: list[str] = field(default_factory=list)  # the state keys the current one holds
    versions: list[int] = field(default_factory=list)  # the probes' versions after its last step
    last_step: int = -1
    rebuilds: list[tuple[int, int]] = field(default_factory=list)  # (first step of the new one, steps of the old)
    state_lost: list[str] = field(default_factory=list)
    frame: UserFrame | None = None
    retired: list[weakref.ref[torch.optim.Optimizer]] = field(default_factory=list)
    alternating: bool = False
    # once a rebuild was seen: each step's update of a slice of one parameter (device tensors)
    copy: torch.Tensor | None = None
    last_delta: torch.Tensor | None = None
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)  # (old's last, new's first)

    def probe(self) -> torch.Tensor | None:
        ps = [p for r in self.params if (p := r()) is not None and p.is_floating_point()]
        return max(ps, key=lambda p: p.numel()).detach().reshape(-1)[:SLICE] if ps else None

    def matches(self, kind: str, params: list[torch.Tensor]) -> bool:
        return (kind == self.kind and len(params) == self.count
                and all(r() is p for r, p in zip(self.params, params[:PROBE])))

    def untouched(self) -> bool:
        return all((p := r()) is not None and p._version == v for r, v in zip(self.params, self.versions))


class Rebuilds:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.by_opt: dict[int, Lineage] = {}
        self.lineages: list[Lineage] = []

    def step_pre(self, opt: torch.optim.Optimizer, step: int) -> None:
        lin = self.by_opt.get(id(opt))
        if lin is not None and lin.current() is opt:
            if lin.rebuilds:
                self._copy(lin)
            return
        if lin is not None and any(r() is opt for r in lin.retired):
            lin.alternating = True  # an optimizer replaced earlier steps again: two optimizers, one model
            return
        params = _params(opt)
        if not params or isinstance(opt, torch.optim.LBFGS):
            return  # (LBFGS runs its many iterations inside one step: one per fit is how it is used)
        kind = type(opt).__name__
        lr = opt.param_groups[0].get("lr")
        lr = lr if isinstance(lr, (int, float)) else None
        for lin in self.lineages:
            if not lin.matches(kind, params):
                continue
            old = lin.current()
            if (lin.steps >= 1 and lin.state and lin.lr == lr and not lin.alternating and lin.untouched()
                    and not _state_tensors(opt, params[0])):
                lin.rebuilds.append((step, lin.steps))
                lin.state_lost = lin.state
                lin.frame = lin.frame or optimizer_frame(opt)
            else:
                lin.rebuilds.clear()  # a re-initialized model, a new lr, a loaded state: a new start
            if old is not None:
                lin.retired.append(weakref.ref(old))
            lin.current, lin.steps, lin.state = weakref.ref(opt), 0, []
            lin.retired = [r for r in lin.retired if r() is not None]
            self.by_opt[id(opt)] = lin
            if lin.rebuilds:
                self._copy(lin)
            else:
                lin.copy = lin.last_delta = None
            return
        lin = Lineage(kind=kind, lr=lr, params=[weakref.ref(p) for p in params[:PROBE]], count=len(params),
                      current=weakref.ref(opt))
        self.lineages.append(lin)
        self.by_opt[id(opt)] = lin

    def step_post(self, opt: torch.optim.Optimizer, step: int) -> None:
        lin = self.by_opt.get(id(opt))
        if lin is None or lin.current() is not opt:
            return
        lin.steps += 1
        lin.last_step = step
        first = lin.params[0]()
        if first is not None and not lin.state:
            lin.state = _state_tensors(opt, first)
        if lin.copy is not None:
            with torch.no_grad():
                now = lin.probe()
                delta = (now - lin.copy).float().norm() if now is not None and now.shape == lin.copy.shape else None
            lin.copy = None
            if delta is not None:
                if lin.steps == 1 and lin.last_delta is not None:
                    lin.pairs.append((lin.last_delta, delta))
                lin.last_delta = delta
        lin.versions = [p._version if (p := r()) is not None else -1 for r in lin.params]

    @staticmethod
    def _copy(lin: Lineage) -> None:
        with torch.no_grad():
            p = lin.probe()
            lin.copy = p.clone() if p is not None else None

    def findings(self, losses: list[tuple[int, float | None]]) -> list[Finding]:
        out = []
        for lin in self.lineages:
            if len(lin.rebuilds) < MIN_REBUILDS or lin.alternating:
                continue
            out.append(self._finding(lin, losses))
        return out

    def _finding(self, lin: Lineage, losses: list[tuple[int, float | None]]) -> Finding:
        steps = [n for _, n in lin.rebuilds]
        per = int(statistics.median(steps))
        w = max(1, min(WINDOW, per // 2))
        rises, jumps = 0, []
        judged = 0
        for at, _ in lin.rebuilds:
            before = [v for s, v in losses if v is not None and at - w <= s < at]
            after = [v for s, v in losses if v is not None and at <= s < at + w]
            if not before or not after:
                continue
            judged += 1
            b, a = statistics.fmean(before), statistics.fmean(after)
            jumps.append(a - b)
            rises += a > b
        ratios = []
        if lin.pairs:  # the run's one read of these numbers, at its end
            with torch.no_grad():
                vals = torch.stack([torch.stack([a, b]) for a, b in lin.pairs]).tolist()
            ratios = [b / a for a, b in vals if a > 0 and b == b]
        jump = statistics.median(ratios) if ratios else None
        rose = judged >= MIN_REBUILDS and rises * 2 > judged
        jumped = jump is not None and jump >= JUMP
        harm = rose or jumped
        ev: dict[str, Any] = {
            "optimizer": lin.kind, "rebuilds": len(lin.rebuilds),
            "rebuilt_at_steps": [s for s, _ in lin.rebuilds][:12],
            "steps_per_optimizer": per, "state_discarded": lin.state_lost,
            "parameters": lin.count, "lr": num(lin.lr) if lin.lr is not None else None,
            "loss_windows": w, "rebuilds_after_which_loss_rose": f"{rises} of {judged}",
            "mean_loss_change_at_rebuild": num(statistics.fmean(jumps)) if jumps else None,
            "first_update_vs_last_update": num(jump) if jump is not None else None,
            "update_pairs_measured": len(ratios),
        }
        said = []
        if jumped:
            said.append(f"the first step of each new optimizer moved the parameters {jump:.1f}x as far as the last "
                        f"step of the one before (median of {len(ratios)} rebuilds)")
        if rose:
            said.append(f"the mean loss of the {w} step(s) after a rebuild was above that of the {w} before it "
                        f"at {rises} of {judged} rebuilds")
        if rose:  # measured harm: the loss rose across the rebuilds (the update jump alone is an effect: the
            ev["harm"] = "; ".join(said)  # harm gate then keeps it a warning only if the run did not learn)
        elif said:
            ev["effect"] = "; ".join(said)
        return finding("optimizer_state_reset", category=Category.OTHER, stage=Stage.OPTIMIZER,
                       severity=Severity.WARNING if harm else Severity.INFO, step=lin.rebuilds[0][0],
                       module=lin.kind, op=lin.kind, frame=lin.frame, optimizer=lin.kind,
                       params=lin.count, rebuilds=len(lin.rebuilds), steps=per,
                       state=", ".join(lin.state_lost) or "its state", evidence=ev)
