"""A frozen BatchNorm put in `eval()` on its own, switched back by a parent's `train()` (session 10).

Freezing a normalization layer takes two things: its parameters' `requires_grad=False` and
`eval()` mode, so that its running statistics stay those it was trained with. `eval()` is a
mode, not a flag that sticks: `nn.Module.train()` recurses into every submodule, so the
`model.train()` at the start of the next epoch puts the frozen layer back in training mode. It
then normalizes with batch statistics and folds every training batch into its running mean and
variance: the frozen encoder drifts toward the new data while every parameter says frozen.

The invariant: a module the code put in `eval()` on its own (not as part of a whole model's
`eval()`), whose parameters are all frozen, keeps its running statistics through training. The
session wraps `nn.Module.train` (and so `eval`): an outermost call on a module that is not a
watched model marks the normalization layers under it; an outermost `train(True)` on an
ancestor that flips a marked layer whose parameters are all frozen notes its
`num_batches_tracked`; at the end, a layer whose count grew since then is the finding (one per
`train()` line). A `train()` called on the marked layer itself is the code changing its mind.
Cost: the wrapper runs per `train()` / `eval()` call, not per step.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import torch
from torch import nn

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, in_user_file, user_frame_of, user_stack_frame


def _norms(module: nn.Module) -> list[nn.Module]:
    return [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._NormBase)
            and m.track_running_stats and isinstance(m.num_batches_tracked, torch.Tensor)]


def _caller(skip: int) -> UserFrame | None:
    """The user's line that called `train()` / `eval()`: past the model's own `train` override
    (`super().train(mode)` inside it is not where the mode was asked for)."""
    f = user_stack_frame(skip)
    while f is not None and f.f_code.co_name == "train":
        outer = f.f_back
        while outer is not None and not in_user_file(outer):
            outer = outer.f_back
        if outer is None:
            break
        f = outer
    return user_frame_of(f) if f is not None else None


def _count(m: nn.Module) -> int:
    t = m.num_batches_tracked
    return int(t) if isinstance(t, torch.Tensor) else 0


def _short(frame: UserFrame | None) -> str:
    return f"{os.path.basename(frame.file)}:{frame.line}" if frame is not None else "?"


class EvalUndone:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.depth = 0
        # id(layer) -> (layer, the module eval() was called on, the line)
        self.marked: dict[int, tuple[weakref.ref[nn.Module], weakref.ref[nn.Module], UserFrame | None]] = {}
        self.undone: dict[int, tuple[weakref.ref[nn.Module], UserFrame | None, UserFrame | None, int]] = {}

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
            if any(module is m for m in self.session.models):
                return  # a whole model's eval(): the usual evaluation pass
            norms = _norms(module)
            if norms:
                frame = _caller(3)
                for m in norms:
                    self.marked[id(m)] = (weakref.ref(m), weakref.ref(module), frame)
            return
        if not self.marked:
            return
        frame = None
        inside = None
        for m in _norms(module):
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
            params = list(m.parameters())
            if id(m) in self.undone or any(p.requires_grad for p in params):
                continue
            frame = frame or _caller(3)
            self.undone[id(m)] = (weakref.ref(m), entry[2], frame, _count(m))

    def end(self) -> list[Finding]:
        by_line: dict[tuple[str, int | None], list[tuple[nn.Module, UserFrame | None, UserFrame | None, int]]] = {}
        for ref, eval_at, train_at, count in self.undone.values():
            m = ref()
            if m is None or not getattr(m, "track_running_stats", False) \
                    or any(p.requires_grad for p in m.parameters()):
                continue  # (unfrozen since: the statistics may follow the data again)
            grew = _count(m) - count
            if grew > 0:
                key = (train_at.file if train_at else "", train_at.line if train_at else None)
                by_line.setdefault(key, []).append((m, eval_at, train_at, grew))
        out = []
        for rows in by_line.values():
            names = [self.session.module_name(m) or type(m).__name__ for m, _, _, _ in rows]
            m, eval_at, train_at, grew = rows[0]
            batches = max(r[3] for r in rows)
            ev = {"modules": names[:8], "count": len(rows), "kind": type(m).__name__,
                  "eval_line": _short(eval_at), "train_line": _short(train_at),
                  "parameters_frozen": True, "batches_folded_into_running_stats": batches,
                  "training_now": m.training}
            fields = {"module": names[0], "count": len(rows), "kind": type(m).__name__,
                      "eval_line": _short(eval_at), "batches": batches}
            out.append(from_catalogue(
                Category.SILENT, "silent.frozen_norm_retrained", "ledger.frozen_norm", fields=fields,
                cause_key="ledger.frozen_norm.cause", next_key="ledger.frozen_norm.next", frame=train_at,
                evidence=ev, source_line=True, severity=Severity.WARNING, stage=Stage.FORWARD,
                module=names[0], parameter=f"{names[0]}.running_mean", op=type(m).__name__))
        return out
