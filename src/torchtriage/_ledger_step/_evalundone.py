"""A frozen BatchNorm put in `eval()` on its own, switched back by a parent's `train()` (session 10).

Freezing a normalization layer takes two things: its parameters' `requires_grad=False` and
`eval()` mode, so that its running statistics stay those it was trained with. `eval()` is a
mode, not a flag that sticks: `nn.Module.train()` recurses into every submodule, so the
`model.train()` at the start of the next epoch puts the frozen layer back in training mode. It
then normalizes with batch statistics and folds every training batch into its running mean and
variance: the frozen encoder drifts toward the new data while every parameter says frozen.

The invariant: a module the code put in `eval()` on its own (not as part of a whole model's
`eval()`) keeps its running statistics through training when either its parameters are all
frozen, or `eval()` was asked of the normalization layer itself (`for m in self.modules(): if
isinstance(m, nn.BatchNorm2d): m.eval()`, a `freeze_bn()`: the statistics are what is frozen,
whatever the affine weights do; session 19). The session wraps `nn.Module.train` (and so
`eval`): an outermost call on a module that is not a watched model marks the normalization
layers under it (a broader `eval()` later, an evaluation pass over the whole model, keeps the
narrower mark); an outermost `train(True)` on an ancestor that flips a marked layer copies its
statistics (`_normstats.Kept`); at the end, a layer whose statistics moved since is the finding
(one per `train()` line), with how far they moved. A `train()` called on the marked layer
itself, or on a part of what `eval()` froze, is the code changing its mind; an `eval()` that
freezes the layer again after the flip (the fixed twin: `model.train()` then `freeze_bn()`) says
the code manages the mode itself, and the layer is not judged again.

Every outermost `train(True)` call's receiver and line are kept too (`trained`): the frozen-part
watch (`_frozenpart`) reads them for the line that put a model in training mode, and for a
`train()` asked of a frozen part itself (statistics kept moving on purpose).
Cost: the wrapper runs per `train()` / `eval()` call, not per step.
"""

from __future__ import annotations

import types
import weakref
from typing import Any

from torch import nn

from .._findings import Finding
from .._frames import UserFrame, in_user_file, user_frame_of, user_stack_frame
from ._normstats import Drifted, Kept, finding, norms, short


def _caller(skip: int) -> UserFrame | None:
    """The user's line that called `train()` / `eval()`: past the model's own `train` override
    (`super().train(mode)` inside it is not where the mode was asked for)."""
    f = user_stack_frame(skip)
    while f is not None and _override(f):
        outer = f.f_back
        while outer is not None and not in_user_file(outer):
            outer = outer.f_back
        if outer is None:
            break
        f = outer
    return user_frame_of(f) if f is not None else None


def _override(f: types.FrameType) -> bool:
    """`f` runs a module's own `train` method (not a user function named `train`)."""
    code = f.f_code
    if code.co_name != "train" or code.co_argcount == 0:
        return False
    obj = f.f_locals.get(code.co_varnames[0])
    return isinstance(obj, nn.Module) and any(
        getattr(vars(c).get("train"), "__code__", None) is code for c in type(obj).__mro__)


def _frozen(m: nn.Module) -> bool:
    return not any(p.requires_grad for p in m.parameters())


class EvalUndone:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.depth = 0
        # id(layer) -> (layer, the module eval() was called on, the line)
        self.marked: dict[int, tuple[weakref.ref[nn.Module], weakref.ref[nn.Module], UserFrame | None]] = {}
        # id(layer) -> its statistics when a parent's train() flipped it (eval line, train line,
        # parameters frozen then, eval() asked of the layer itself in `extra`)
        self.undone: dict[int, Kept] = {}
        self.managed: set[int] = set()  # layers the code froze again after a flip
        # id(receiver) -> (receiver, the line of its last outermost train(True), when)
        self.trained: dict[int, tuple[weakref.ref[nn.Module], UserFrame | None, int]] = {}
        self.calls = 0
        self.reported: set[int] = set()

    def install(self) -> None:
        original = nn.Module.train
        watch = self

        def train(self: nn.Module, mode: bool = True) -> nn.Module:
            __tracebackhide__ = True
            watch.depth += 1
            try:
                result = original(self, mode)
            finally:
                watch.depth -= 1
            if watch.depth == 0 and not watch.session.busy:
                try:
                    watch.called(self, bool(mode))
                except Exception as e:  # our bug: the user's mode is set regardless
                    watch.session.internal_error("step_ledger.train_mode", e)
            return result

        train.__wrapped__ = original  # type: ignore[attr-defined]
        self.session.patch(nn.Module, "train", train)

    def called(self, module: nn.Module, mode: bool) -> None:
        if not mode:
            self._eval(module)
            return
        frame = _caller(3)
        self.calls += 1
        self.trained[id(module)] = (weakref.ref(module), frame, self.calls)
        if not self.marked:
            return
        inside = None
        for m in norms(module):
            entry = self.marked.get(id(m))
            if entry is None or entry[0]() is not m:
                continue
            receiver = entry[1]()
            if module is m or receiver is None or receiver is module:
                del self.marked[id(m)]  # train() on what eval() was called on: the code unfreezes it
                self.undone.pop(id(m), None)
                continue
            inside = inside if inside is not None else {id(x) for x in module.modules()}
            if id(receiver) not in inside:
                del self.marked[id(m)]  # train() on a part of what eval() froze: asked for on purpose
                continue
            own = receiver is m
            if id(m) in self.undone or id(m) in self.managed or not m.training or (not own and not _frozen(m)):
                continue
            self.undone[id(m)] = Kept.of(m, eval_at=entry[2], train_at=frame, frozen=_frozen(m), own=own)

    def _eval(self, module: nn.Module) -> None:
        if any(module is m for m in self.session.models):
            return  # a whole model's eval(): the usual evaluation pass
        layers = norms(module)
        if not layers:
            return
        inside: set[int] | None = None
        frame = _caller(4)
        for m in layers:
            entry = self.marked.get(id(m))
            receiver = entry[1]() if entry is not None and entry[0]() is m else None
            if receiver is not None and receiver is not module:
                inside = inside if inside is not None else {id(x) for x in module.modules()}
                if id(receiver) in inside:
                    continue  # a broader eval() (an evaluation pass): the narrower freeze stands
            self.marked[id(m)] = (weakref.ref(m), weakref.ref(module), frame)
            if self.undone.pop(id(m), None) is not None:
                self.managed.add(id(m))  # frozen again after the flip: the code manages the mode

    def trained_inside(self, part: nn.Module) -> bool:
        """A `train(True)` was asked of `part` or of a module inside it."""
        ids = {id(x) for x in part.modules()}
        return any(i in ids and ref() is not None for i, (ref, _, _) in self.trained.items())

    def last_train(self, layer: nn.Module) -> UserFrame | None:
        """The line of the most recent outermost `train(True)` whose receiver holds `layer`."""
        found: tuple[int, UserFrame | None] = (-1, None)
        for ref, frame, when in self.trained.values():
            r = ref()
            if r is not None and when > found[0] and any(layer is x for x in r.modules()):
                found = (when, frame)
        return found[1]

    def end(self) -> list[Finding]:
        by_line: dict[tuple[str, int | None, bool], list[tuple[Drifted, Kept]]] = {}
        for kept in self.undone.values():
            m = kept.layer()
            if m is None or (kept.extra["frozen"] and not _frozen(m)):
                continue  # (unfrozen since: the statistics may follow the data again)
            moved = kept.moved()
            if moved is None or not moved.harm:
                continue
            train_at: UserFrame | None = kept.extra["train_at"]
            own = bool(kept.extra["own"]) and not kept.extra["frozen"]
            key = (train_at.file if train_at else "", train_at.line if train_at else None, own)
            name = self.session.module_name(m) or type(m).__name__
            by_line.setdefault(key, []).append((Drifted(m, name, name, moved), kept))
        out = []
        for (_, _, own), rows in by_line.items():
            kept = rows[0][1]
            eval_at, train_at = kept.extra["eval_at"], kept.extra["train_at"]
            self.reported.update(id(r.layer) for r, _ in rows)
            out.append(finding(
                "frozen_norm.own_eval" if own else "frozen_norm", [r for r, _ in rows], train_at,
                {"eval_line": short(eval_at)},
                {"eval_line": short(eval_at), "train_line": short(train_at), "parameters_frozen": not own,
                 "eval_asked_of_the_layer_itself": bool(kept.extra["own"])}))
        return out
