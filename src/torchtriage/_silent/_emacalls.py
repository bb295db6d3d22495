"""An averaged copy is updated once per optimizer step: its update between two steps averages a
source that has not moved.

An EMA / mean-teacher update blends the copy toward the parameters the last optimizer step
produced; whatever it counts (its step counter, a decay warm-up, `update_every`,
`update_after_step`) counts optimizer steps. Called once per micro-batch in a loop that
accumulates k micro-batches per step (an update placed after `with accelerator.accumulate(...)`
with no `if accelerator.sync_gradients:`), it runs k times per step: every counter runs k times
too fast, and each extra blend pulls the copy toward parameters it already averaged.

Seen from the update's own call: when `AveragedCopies`' pass-through mode meets the first in-place
op on a copy, the stack is walked outward to the frame called by the training loop (the user
frame that made the first `optimizer.step()`): that function (a method of the EMA's class, found
in its class's `__dict__`, or a function the loop's module names) is wrapped for the session
(`Session.patch`, on the class or the module: nothing is put on the user's object). Each call of
it on that object is counted with the optimizer steps since the previous call (a global
optimizer step post-hook, removed at the end) and whether the call wrote the copy (its version
counter). An update written inline in the loop is not followed.

`silent.ema_updated_between_steps` at the end: at least `MIN_CALLS` calls, `MIN_PER_STEP` or more
per optimizer step, `IDLE_SHARE` of them or more with no optimizer step since the previous one,
and some call changed the updater's state; the calls per optimizer step are the harm (a warning).
"""

from __future__ import annotations

import functools
import sys
import types
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from torch.optim import optimizer as _optim_mod

from .._frames import UserFrame, is_our_file, user_frame_of

MIN_CALLS = 8
MIN_PER_STEP = 1.5  # calls per optimizer step (two micro-batches per step: 2)
IDLE_SHARE = 0.4  # calls with no step since the previous one (k micro-batches: (k - 1) / k)


@dataclass
class _Followed:
    name: str  # the update's qualified name
    frame: UserFrame  # the loop's line that calls it
    shadow: weakref.ref[torch.Tensor]
    holder: str
    obj: Any = None  # weakref to the update's `self` (None: a plain function)
    calls: int = 0
    idle: int = 0  # calls with no optimizer step since the previous call
    writes: int = 0  # calls that wrote the copy
    idle_writes: int = 0
    first_steps: int = -1  # the optimizer steps counted at the first call
    last_steps: int = -1
    steps: int = 0  # optimizer steps between the first call and the last


class UpdateCalls:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.loop_code: types.CodeType | None = None
        self.followed: _Followed | None = None
        self.tried = False
        self.optimizer_steps = 0
        self.handle: Any = None

    def note_loop(self, frame: types.FrameType | None) -> None:
        """The user frame that made the first optimizer step: the training loop."""
        if frame is not None and self.loop_code is None:
            self.loop_code = frame.f_code

    def first_write(self, shadow: torch.Tensor, holder: str) -> None:
        """The first in-place op on a copy: find the call of the training loop it runs under."""
        if self.tried or self.loop_code is None:
            return
        self.tried = True
        f: types.FrameType | None = sys._getframe(1)
        chain: list[types.FrameType] = []  # the frames under the loop's, outermost last
        while f is not None and f.f_code is not self.loop_code:
            if not is_our_file(f.f_code.co_filename):
                chain.append(f)
            f = f.f_back
        if f is None or not chain:
            return  # written inline in the loop, or not under it
        for call in reversed(chain[-3:]):  # (past a decorator's wrapper frame: `torch.no_grad()`)
            if self._follow(call, f, shadow, holder):
                return

    def _follow(self, call: types.FrameType, loop: types.FrameType, shadow: torch.Tensor, holder: str) -> bool:
        code, name = call.f_code, call.f_code.co_name
        obj = call.f_locals.get("self") if code.co_argcount else None
        target: Any = None
        if obj is not None and not isinstance(obj, type):
            for cls in type(obj).__mro__:
                fn = cls.__dict__.get(name)
                if fn is not None and _code(fn) is code:
                    target = cls
                    break
        else:
            obj = None
        if target is None:
            fn = loop.f_globals.get(name)
            if fn is None or _code(fn) is not code:
                return False
            target, obj = loop.f_globals, None
        qual = f"{type(obj).__name__}.{name}" if obj is not None else name
        followed = _Followed(qual, user_frame_of(loop), weakref.ref(shadow), holder,
                             weakref.ref(obj) if obj is not None else None)
        original = target[name] if isinstance(target, dict) else target.__dict__[name]
        wrapper = self._wrap(original, followed, bound=obj is not None)
        if isinstance(target, dict):
            self.session.patch(_Globals(target), name, wrapper)
        else:
            self.session.patch(target, name, wrapper)
        self.followed = followed
        self.handle = _optim_mod.register_optimizer_step_post_hook(self._stepped)
        return True

    def _stepped(self, *args: Any) -> None:
        self.optimizer_steps += 1

    def _wrap(self, original: Any, fol: _Followed, bound: bool) -> Any:
        calls = self

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            obj = args[0] if bound and args else None
            mine = not bound or (fol.obj is not None and obj is fol.obj())
            before = _state(fol.shadow(), obj) if mine else None
            out = original(*args, **kwargs)
            if mine:
                try:
                    calls.count(fol, _state(fol.shadow(), obj) != before)
                except Exception as e:  # our bug: the user's update went through
                    calls.session.internal_error("silent.ema_calls", e)
            return out

        return wrapped

    def count(self, fol: _Followed, wrote: bool) -> None:
        n = self.optimizer_steps
        idle = n == fol.last_steps
        fol.calls += 1
        if fol.first_steps < 0:
            fol.first_steps = n
        fol.idle += idle
        fol.writes += wrote
        fol.idle_writes += idle and wrote
        fol.last_steps = n
        fol.steps = n - fol.first_steps

    def close(self) -> None:
        if self.handle is not None:
            self.handle.remove()
            self.handle = None

    def verdict(self) -> dict[str, Any] | None:
        fol = self.followed
        if fol is None or fol.calls < MIN_CALLS or fol.writes == 0:
            return None
        steps = max(fol.steps, 1)
        per = fol.calls / steps
        if per < MIN_PER_STEP or fol.idle < IDLE_SHARE * fol.calls:
            return None
        return {"update": fol.name, "frame": fol.frame, "copy": fol.holder, "calls": fol.calls,
                "optimizer_steps": fol.steps, "calls_per_step": round(per, 2),
                "calls_without_a_step_since_the_last": fol.idle, "calls_that_changed_its_state": fol.writes,
                "changes_without_a_step_since_the_last": fol.idle_writes,
                "harm": f"{fol.name}() ran {fol.calls} times for {fol.steps} optimizer steps ({per:.2f} per step): "
                        f"what it counts in calls (its step counter, decay warm-up, update_every) runs {per:.2g}× fast"}


def _state(shadow: torch.Tensor | None, obj: Any) -> tuple[Any, ...]:
    """What an update call changes, read without a device sync: the copy's version counter, the
    updater's own buffers' (a step counter) and its numeric attributes (`self.num_updates`)."""
    out: list[Any] = [shadow._version if shadow is not None else None]
    if isinstance(obj, nn.Module):
        out += [b._version for b in obj.buffers(recurse=False)]
    d = getattr(obj, "__dict__", None) if obj is not None else None
    if isinstance(d, dict):
        out += [v for v in list(d.values())[:64] if type(v) in (int, float, bool)]
    return tuple(out)


class InlineWrites:
    """The copy's writes between the marks of the steps the silent check takes part in (each
    backward call, each optimizer step), read from its version counter: a write with no optimizer
    step since the copy's previous write averaged a source that had not moved. For an update the
    loop writes inline (no call to follow); writes through `.data` do not move the counter."""

    def __init__(self) -> None:
        self.shadow: weakref.ref[torch.Tensor] | None = None
        self.frame: UserFrame | None = None
        self.holder = ""
        self.last: int | None = None
        self.stepped = True  # an optimizer step since the copy's last write
        self.writes = 0
        self.idle = 0
        self.steps = 0

    def follow(self, shadow: torch.Tensor, holder: str) -> None:
        if self.shadow is None:
            self.shadow, self.holder = weakref.ref(shadow), holder

    def gap(self) -> None:
        """The steps' continuity broke (a step the check sat out): start again."""
        self.last = None

    def mark(self, step: bool) -> None:
        t = self.shadow() if self.shadow is not None else None
        if t is None:
            return
        v = t._version
        if self.last is not None and v != self.last:
            self.writes += 1
            self.idle += not self.stepped
            self.stepped = False
        self.last = v
        if step:
            self.stepped = True
            self.steps += 1

    def verdict(self, frame: UserFrame | None) -> dict[str, Any] | None:
        if frame is None or self.writes < MIN_CALLS or self.idle < IDLE_SHARE * self.writes:
            return None
        per = self.writes / max(self.steps, 1)
        if per < MIN_PER_STEP:
            return None
        return {"update": "inline", "frame": frame, "copy": self.holder, "calls": self.writes,
                "optimizer_steps": self.steps, "calls_per_step": round(per, 2),
                "calls_without_a_step_since_the_last": self.idle, "measured": "the steps the check sampled",
                "harm": f"the copy {self.holder} was written {self.writes} times over {self.steps} optimizer steps "
                        f"({per:.2f} per step), {self.idle} times with no step since its previous write"}


class _Globals:
    """A module's globals dict seen as an object, for `Session.patch` (set / restore an item)."""

    def __init__(self, d: dict[str, Any]) -> None:
        object.__setattr__(self, "_d", d)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._d[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._d[name] = value


def _code(fn: Any) -> types.CodeType | None:
    """The code object behind a function, a method descriptor or a decorated wrapper."""
    for _ in range(4):
        if isinstance(fn, (staticmethod, classmethod)):
            fn = fn.__func__
        code = getattr(fn, "__code__", None)
        if isinstance(code, types.CodeType) and getattr(fn, "__wrapped__", None) is None:
            return code
        nxt = getattr(fn, "__wrapped__", None)
        if nxt is None:
            return code if isinstance(code, types.CodeType) else None
        fn = nxt
    return None
