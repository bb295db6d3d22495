"""torch's frames that only exist because torchtriage watched the call (issue 10).

Our frames are not the only ones torchtriage adds to a user's traceback. Two torch frames
come with them:

- A torch function written in Python (`F.binary_cross_entropy`, `Tensor.backward`, ...) that
  sees a `TorchFunctionMode` on the stack calls `torch.overrides.handle_torch_function`, which
  calls the mode; a pass-through mode calls the function again. Each of our modes (the step
  tape, the cut tracer, ...) thus adds the pair "the function at its `handle_torch_function`
  line, `handle_torch_function`" above our mode's frame, and the function's frame runs again
  below it. The pair is ours when the next frame that is not ours is the same function again
  (the re-dispatch); a user's own mode in between keeps its pair.
- `nn.Module._call_impl` runs its hooks through a nested `inner()` while any module hook is
  registered; with our hooks only (global discovery hooks, the root hooks), that `inner` frame
  is ours. It is dropped when every hook the module call could have run was torchtriage's,
  read while our hooks are still registered (the session trims before it removes them).
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.nn.modules import module as _module_mod

_OVERRIDES = os.path.abspath(torch.overrides.__file__)
_MODULE = os.path.abspath(_module_mod.__file__)
_OURS = __name__.rsplit(".", 1)[0] + "."
# the hook dictionaries `_call_impl` reads (on the module, and the `_global` ones) to choose its hooked path
_HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_hooks", "_backward_pre_hooks")


def _file(tb: types.TracebackType) -> str:
    return os.path.abspath(tb.tb_frame.f_code.co_filename)


def _is_our_hook(hook: Any) -> bool:
    module = getattr(hook, "__module__", None) or type(hook).__module__
    return isinstance(module, str) and module.startswith(_OURS)


def _only_our_hooks(module: Any) -> bool:
    """True when every hook a call of `module` would run (its own and the global ones) is ours."""
    if not isinstance(module, torch.nn.Module):
        return False
    own = [getattr(module, k, None) for k in _HOOKS]
    dicts = [*own, *(getattr(_module_mod, "_global" + k, None) for k in _HOOKS)]
    return all(isinstance(d, dict) and all(_is_our_hook(h) for h in d.values()) for d in dicts)


def dispatch_frames(entries: Sequence[types.TracebackType], ours: Callable[[types.TracebackType], bool],
                    hooks: bool = False) -> set[int]:
    """Indices into `entries` (a traceback, outermost first) of torch's frames that exist only
    because of our modes (and, with `hooks`, of our module hooks); `ours(entry)` tells our frames."""
    drop: set[int] = set()
    n = len(entries)
    for i, tb in enumerate(entries):
        code = tb.tb_frame.f_code
        if code.co_name == "handle_torch_function" and i and _file(tb) == _OVERRIDES:
            j = i + 1
            while j < n and ours(entries[j]):
                j += 1
            if j > i + 1 and j < n and entries[j].tb_frame.f_code is entries[i - 1].tb_frame.f_code:
                drop.update((i - 1, i))
        elif hooks and code.co_name == "inner" and i and _file(tb) == _MODULE:
            caller = entries[i - 1].tb_frame
            j = i + 1
            while j < n and ours(entries[j]):
                j += 1
            if (j < n and caller.f_code.co_name == "_call_impl"
                    and _only_our_hooks(caller.f_locals.get("self"))):
                drop.add(i)
    return drop
