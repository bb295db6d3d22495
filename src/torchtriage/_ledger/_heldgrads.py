"""Gradients of an evaluation pass carried into a training step (issue 25): held-out samples never
reach an optimizer step, also through `.grad`.

An evaluation pass that calls `loss.backward()` (a loss helper that always backpropagates, called
with no optimizer for validation) and never steps leaves its gradients in `.grad`; unless something
resets them, the next training step adds its own batch's gradient to them and applies the sum: the
held-out batches are trained on, once per evaluation pass. The pass is a DataLoader pass that your
name makes a validation or test loader (`val_loader`, `test_dl`), or whose forwards all ran in
`eval()` mode; a pass that steps an optimizer itself adapts on purpose (test-time adaptation) and is
not this fault.

The harm is measured: at an optimizer step, one of its parameters' `.grad` is still the tensor the
held-out backward wrote (kept by weak reference) and no `zero_grad` of an optimizer or a module ran
in between. Costs: on a training backward (a model in train() mode, a loader not named held-out)
two attribute reads; on a held-out pass's backward, one walk over the optimizers' parameters (once
per pass); at a step after such a pass, one identity test per parameter.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING, Any

import torch

from .._frames import UserFrame, user_frame_from_stack
from .._zerograd import on_zero_grad
from ._heldnames import SPLIT_OR_EVAL
from ._make import finding

if TYPE_CHECKING:
    from ._checker import DataLedger
    from ._epochs import Epoch, Loader

_HELD = SPLIT_OR_EVAL
_TRAIN = ("train", "support")  # a train+val loader, a few-shot task's support set


@dataclasses.dataclass(eq=False)
class _Pass:
    loader: Loader
    epoch: Epoch
    backward: UserFrame | None  # the first backward of the pass (your line)
    backwards: int = 0
    eval_only: bool = True  # every root forward since its first batch ran in eval() mode
    stepped: bool = False  # an optimizer stepped during the pass: adapting on purpose
    grads: list[tuple[int, weakref.ref[torch.Tensor]]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(eq=False)
class _Leak:
    loader: Loader
    backward: UserFrame | None
    passes: int = 0
    backwards: int = 0
    steps: int = 0
    step_at: list[int] = dataclasses.field(default_factory=list)


class HeldGrads:
    def __init__(self, ledger: DataLedger, session: Any) -> None:
        self.ledger = ledger
        self.session = session
        self.open: _Pass | None = None  # the held-out pass whose gradients are in .grad now
        self.leaks: dict[int, _Leak] = {}  # by loader id
        self.last_training = True  # the latest root forward's model was in train() mode
        self.active = True
        on_zero_grad(session, "data_ledger.heldgrads", self.on_zero_grad)

    def on_forward(self, model: torch.nn.Module) -> None:
        self.last_training = model.training
        p = self.open
        if p is not None and model.training and p.epoch is self._current_epoch():
            p.eval_only = False

    def _current_epoch(self) -> Epoch | None:
        last = self.ledger.follower.last
        return last.epochs[-1] if last is not None and last.epochs else None

    def on_backward_end(self) -> None:
        last = self.ledger.follower.last
        if last is None or not last.epochs or not self.active:
            return
        ep = last.epochs[-1]
        if ep.stop is not None:
            return  # (the pass ended: this backward is not its batches')
        p = self.open
        if p is not None and p.epoch is not ep:
            return  # (another pass adds to the gradients an earlier pass left: that one is judged)
        if p is None:
            if self.last_training and not _named_held(last):
                return  # a training loader's backward (the common case: nothing kept)
            p = self.open = _Pass(last, ep, user_frame_from_stack(2))
            for opt in self.session.optimizers:
                for g in opt.param_groups:
                    for q in g["params"]:
                        if q.grad is not None:
                            p.grads.append((id(q), weakref.ref(q.grad)))
        p.backwards += 1

    def on_zero_grad(self, obj: Any, kind: str, frame: Any) -> None:
        self.open = None

    def on_step(self, optimizer: torch.optim.Optimizer) -> None:
        p = self.open
        if p is None:
            return
        last = self.ledger.follower.last
        if last is p.loader and p.epoch.stop is None:
            p.stepped = True  # a step inside the pass: it trains (or adapts) on that loader itself
            self.open = None
            return
        self.open = None
        if p.stepped or last is p.loader or not _held(p):
            return  # (the same loader's next pass: gradient accumulation across its epochs)
        kept = dict(p.grads)
        if not any((ref := kept.get(id(q))) is not None and ref() is not None and q.grad is ref()
                   for g in optimizer.param_groups for q in g["params"]):
            return  # (the gradients were reset some other way: `p.grad = None`)
        leak = self.leaks.get(id(p.loader))
        if leak is None:
            leak = self.leaks[id(p.loader)] = _Leak(p.loader, p.backward)
        leak.passes += 1
        leak.backwards += p.backwards
        leak.steps += 1
        if len(leak.step_at) < 5:
            leak.step_at.append(int(self.session.step))

    def end(self) -> list[Any]:
        self.active = False
        out = []
        for leak in self.leaks.values():
            entry = leak.loader
            severity = "error" if leak.steps >= 2 else "warning"
            fields = {"loader": entry.name, "passes": leak.passes, "backwards": leak.backwards, "steps": leak.steps}
            evidence = {"loader": entry.name, "loader_at": entry.where(), "evaluation_passes": leak.passes,
                        "backwards_in_those_passes": leak.backwards, "optimizer_steps_applying_them": leak.steps,
                        "first_steps": leak.step_at}
            out.append(finding("heldout_trained", "held_grads", severity, leak.backward or entry.frame, fields,
                               evidence))
        return out


def _held(p: _Pass) -> bool:
    """The pass is an evaluation: its loader's name says held-out, or all its forwards ran in eval()."""
    name = p.loader.name.lower()
    if any(w in name for w in _TRAIN):
        return False
    return bool(_HELD.search(name)) or p.eval_only


def _named_held(loader: Loader) -> bool:
    name = loader.name.lower()
    return not any(w in name for w in _TRAIN) and bool(_HELD.search(name))
