"""Our torch-function modes on the mode stack: pushed under the user's, taken off by identity.

Checks push pass-through `TorchFunctionMode`s (the step tape, the cut tracer, the metric
region, ...) at moments the user does not see: a hook that fires inside the user's own
`with torch.device("cuda"):` or `with MyMode():` block. Pushed on top, such a mode would be
what the user's block pops at its exit (`TorchFunctionMode.__exit__` and `torch.device`'s
`__exit__` pop the top of the stack), leaving the user's mode on the stack for the rest of the
process and ours lost. So `push_mode` slides ours *under* every mode already there, except a
`DeviceContext` entered through Python (`torch.set_default_device`, which keeps itself at the
bottom and checks it is there when it leaves); `remove_mode` takes ours out wherever it sits.

`own_modes_off()` is the other way round: torchtriage's own arithmetic runs without our modes,
which otherwise run their Python handlers on every torch call of it. `Session._emit` runs every
check's event under it (in a session's first steps the tape, the cut tracer and the metric
region saw ~3,700 calls a step of the checks' own ops on a small GPT, recording none), and the
optimizer's pre-hook sets our modes aside until its post-hook (`set_aside` / `put_back`: ~10 ops
a parameter that no mode of ours records). Both pop our modes off the top of the stack and put
them back; a mode that is not ours (the user's, a test's sync audit) stops the popping and keeps
seeing everything as before. `remove_mode` also finds a mode that is set aside, so an owner that
drops its mode meanwhile (a window ending inside an event) does not get it pushed back.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch


def _pinned_bottom(mode: Any) -> bool:
    # a Python-entered DeviceContext has `old_device` (set by its __enter__); the one a
    # `with torch.device(...)` block pushes from C++ has not, and is popped from the top
    return type(mode).__name__ == "DeviceContext" and hasattr(mode, "old_device")


def push_mode(mode: Any) -> None:
    """Put `mode` on the torch-function mode stack under the modes already there (above a
    default-device context at the bottom), so that every user's block pops its own mode."""
    stack = []
    while torch._C._len_torch_function_stack() > 0:
        stack.append(torch._C._pop_torch_function_stack())
    stack.reverse()  # bottom first
    at = 0
    while at < len(stack) and _pinned_bottom(stack[at]):
        at += 1
    for m in [*stack[:at], mode, *stack[at:]]:
        torch._C._push_on_torch_function_stack(m)


def remove_mode(target: Any) -> bool:
    """Take `target` off the TorchFunctionMode stack wherever it sits, keeping the modes above
    it in order; False (stack unchanged) when it is not there (e.g. inside its own handler)."""
    above = []
    found = False
    while torch._C._len_torch_function_stack() > 0:
        mode = torch._C._pop_torch_function_stack()
        if mode is target:
            found = True
            break
        above.append(mode)
    for mode in reversed(above):
        torch._C._push_on_torch_function_stack(mode)
    if not found:
        for popped in _aside:  # set aside for a while: it stays off when put back
            for i, mode in enumerate(popped):
                if mode is target:
                    del popped[i]
                    return True
    return found


_OURS = __name__.rsplit(".", 1)[0] + "."
# Our modes taken off the stack for a while (`own_modes_off`, `set_aside`), each list in stack
# order: `remove_mode` finds a mode there too, so an owner that drops its mode meanwhile (a
# window that ends inside an event) does not get it pushed back.
_aside: list[list[Any]] = []


def _pop_ours() -> list[Any]:
    """Pop torchtriage's modes off the top of the stack, down to the first mode that is not ours;
    returned bottom first. Registered in `_aside` until `_push_back`."""
    n = torch._C._len_torch_function_stack()
    popped: list[Any] = []
    while n and type(torch._C._get_function_stack_at(n - 1)).__module__.startswith(_OURS):
        popped.append(torch._C._pop_torch_function_stack())
        n -= 1
    popped.reverse()
    _aside.append(popped)
    return popped


def _push_back(popped: list[Any]) -> None:
    for i in range(len(_aside) - 1, -1, -1):
        if _aside[i] is popped:
            del _aside[i]
            break
    for mode in popped:
        torch._C._push_on_torch_function_stack(mode)


class _OwnModesOff:
    __slots__ = ("popped",)

    def __enter__(self) -> None:
        self.popped = _pop_ours()

    def __exit__(self, *exc: Any) -> None:
        _push_back(self.popped)


_NOTHING = contextlib.nullcontext()


def own_modes_off() -> contextlib.AbstractContextManager[None]:
    """Our own arithmetic (and every check's event, `Session._emit`) without our modes on top of
    the stack; the empty stack of most steps costs one call."""
    if not torch._C._len_torch_function_stack():
        return _NOTHING
    return _OwnModesOff()


def set_aside() -> list[Any]:
    """Take our modes off the top of the stack until `put_back(token)` (the optimizer's step: no
    mode of ours records anything there, and each of its ~10 ops a parameter would run their
    Python handlers)."""
    return _pop_ours() if torch._C._len_torch_function_stack() else []


def put_back(token: list[Any]) -> None:
    if token or any(a is token for a in _aside):
        _push_back(token)


def forget(token: list[Any]) -> None:
    """Drop a `set_aside` token without putting its modes back (the session ends)."""
    for i in range(len(_aside) - 1, -1, -1):
        if _aside[i] is token:
            del _aside[i]
            return
