"""Where an `exp` near overflow was written: the user's line and module, found on the report path.

The session's exp walk sees only `ExpBackward0` nodes (no line, no module). Once a walk has a
verdict, this locates the call — once per (shape, dtype), never on a clean step:
  * exp in the loss code: the loss region saw it run (`LossRegion.exp_sites`, matched by storage);
  * exp in the model's forward: the step's forward is replayed from the session's snapshot
    (same batch, same RNG and autocast; RNG and buffers restored afterwards) while a
    `TorchFunctionMode` notes each `exp` with its frame and module path.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .._frames import UserFrame, trims_errors, user_frame_from_stack

EXP_FUNCS = frozenset({torch.exp, torch.Tensor.exp, torch.special.exp2, torch.exp2, torch.Tensor.exp2})


class _ExpSpy(TorchFunctionMode):
    def __init__(self, modules: Any) -> None:
        super().__init__()
        self.modules = modules
        self.sites: list[tuple[tuple[int, ...], torch.dtype, UserFrame | None, str | None]] = []

    @trims_errors
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func in EXP_FUNCS and isinstance(out, torch.Tensor):
            self.sites.append((tuple(out.shape), out.dtype, user_frame_from_stack(2), self.modules.top))
        return out


def locate_in_forward(session: Any, shape: tuple[int, ...], dtype: torch.dtype,
                      autocast: list[tuple[str, torch.dtype]]) -> tuple[UserFrame | None, str | None]:
    """Replay the step's forward and return the (frame, module) of the first exp of that shape."""
    from .._nonfinite._localize import _namer
    from .._nonfinite._replay import call_model, replaying
    from .._nonfinite._trace import ModuleStack

    snap = session.snapshot
    if snap is None or not snap.has_batch or snap.model is None:
        return None, None
    model = getattr(snap.model, "_orig_mod", snap.model)
    mods = ModuleStack(_namer(session))
    spy = _ExpSpy(mods)
    try:
        with replaying(session, snap, model, autocast), torch.no_grad(), mods, spy:
            call_model(model, snap)
    except Exception:  # a replay that cannot run leaves the finding without a line, never breaks the step
        return None, None
    for s_shape, s_dtype, frame, module in spy.sites:
        if s_shape == shape and s_dtype == dtype:
            return frame, module
    return None, None


def storage_of(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return 0



