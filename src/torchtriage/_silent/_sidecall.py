"""Evaluation that enters a model through another method than forward (session 11).

An evaluation runs a model's deterministic form: dropout off, batch norm on its running
statistics. The root hooks see `model(x)` run in train() mode without grad; they cannot see
`model.generate(x)`, `model.predict(x)`, `model.encode(x)`: methods that call the submodules
directly, so the root's own hooks never run. `SideCalls` puts one forward hook on each
stochastic module (dropout with p > 0, batch norm tracking statistics) of a watched model;
during training (grad enabled) the hook returns at its first test. A call in train() mode
without grad outside any root call is handed to the silent check, which treats it as the root
path treats a no-grad train-mode forward: its outputs are followed (`_sampling`), and only
when they feed an evaluation loss or a metric is `train_mode_while_evaluating` reported. The
line is the caller of the model's method: the innermost user frame whose `self` is not one of
the model's modules.
"""

from __future__ import annotations

import sys
import weakref
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.nn as nn

from .._frames import UserFrame, find_frame, in_user_file, user_frame_of
from .._transparent import our_hook, standing_aside
from ._loop import _stochastic

if TYPE_CHECKING:
    from .._session import Session

MAX_MODULES = 256  # hooked per model


class SideCalls:
    """Forward hooks on the stochastic modules of the watched models."""

    def __init__(self, session: Session, on_call: Callable[[nn.Module, str, Any], None]) -> None:
        self.session = session
        self.on_call = on_call  # (model, module path, output)
        self._handles: dict[int, Any] = {}
        self._members: dict[int, frozenset[int]] = {}  # id(model) -> ids of its modules

    def watch(self, model: nn.Module) -> None:
        if id(model) in self._members:
            return
        self._members[id(model)] = frozenset(id(m) for m in model.modules())
        ref = weakref.ref(model)
        modules = dict(model.named_modules())
        for path, _ in _stochastic(model)[:MAX_MODULES]:
            m = modules.get(path)
            if m is None or m is model or id(m) in self._handles:
                continue  # (the root itself: its root hooks see its calls)
            self._handles[id(m)] = m.register_forward_hook(our_hook(self._hook(ref, path)))

    def _hook(self, ref: weakref.ref[nn.Module], path: str) -> Any:
        def post(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            __tracebackhide__ = True
            if torch.is_grad_enabled() or not module.training or self.session.busy or standing_aside():
                return  # (training: the one test a training forward pays; compiled or traced code: not ours)
            model = ref()
            if model is None:
                return
            try:
                self.on_call(model, path, output)
            except Exception as e:  # our bug: report it, the user's forward goes on
                self.close()
                self.session.internal_error("silent.train_mode_while_evaluating", e)
        return post

    def caller(self, model: nn.Module) -> UserFrame | None:
        """The user's line that called into `model`: the innermost user frame whose `self` is
        not one of its modules."""
        members = self._members.get(id(model), frozenset())

        def outside(f: Any) -> bool:
            return in_user_file(f) and id(f.f_locals.get("self")) not in members

        f = find_frame(outside, sys._getframe(1), depth=64)
        return user_frame_of(f) if f is not None else None

    def close(self) -> None:
        for h in self._handles.values():
            h.remove()
        self._handles.clear()
        self._members.clear()
