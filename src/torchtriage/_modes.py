"""`own_modes_off()`: torchtriage's own arithmetic without torchtriage's TorchFunctionModes.

In a session's first steps several checks keep a `TorchFunctionMode` on the stack (the step
tape, the gradient check's cut tracer, the silent loss region, the metric region). Every torch
call then runs their Python handlers — the sentinel's one read of ~200 small tensors took 12 ms
of a 70 ms step that way. The flags are not the user's ops, so the read pops torchtriage's modes
off the top of the stack while it runs and puts them back. A mode that is not ours (the user's,
a test's sync audit) stops the popping: it keeps seeing everything above and below it as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

_C = torch._C
_OURS = __name__.rsplit(".", 1)[0] + "."


@contextlib.contextmanager
def own_modes_off() -> Iterator[None]:
    n = _C._len_torch_function_stack()
    if not n:
        yield
        return
    popped = []
    try:
        while n and type(_C._get_function_stack_at(n - 1)).__module__.startswith(_OURS):
            popped.append(_C._pop_torch_function_stack())
            n -= 1
        yield
    finally:
        for mode in reversed(popped):
            _C._push_on_torch_function_stack(mode)
