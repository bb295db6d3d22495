"""The causal probe, run automatically: a watched sequence model trained on shifted targets
(the cross_entropy target equals the model's input ids moved by one position) must not see the
future. `check_causal` is run once per model, at the end of the step where the shift was seen,
on the first 2 sequences of that batch, with the same extra arguments (a mask, ...) the user
passed: 2 forwards in eval mode under no_grad. The RNG state and every submodule's train/eval
mode are restored, so the run's numbers do not change.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from .._catalogue import msg
from .._findings import Finding
from .._frames import UserFrame
from .._silent._common import is_index_tensor

ROWS = 2


def shift_share(target: Any, ids: Any, ignore_index: int = -100) -> list[torch.Tensor] | None:
    """Device numbers [positions where target == the next input token, valid positions] when the
    target lines up with `ids` shifted by one ((B, T-1) against ids[:, 1:], or (B, T) whose first
    T-1 positions do), else None. No read."""
    if not (is_index_tensor(target) and is_index_tensor(ids)) or ids.dim() != 2 or ids.shape[1] < 4:
        return None
    if target.device != ids.device:
        return None
    b, t = ids.shape
    if target.numel() == b * (t - 1):
        grid = target.reshape(b, t - 1)
    elif target.numel() == b * t:
        grid = target.reshape(b, t)[:, :-1]
    else:
        return None
    valid = grid != ignore_index
    return [((grid == ids[:, 1:]) & valid).sum(), valid.sum()]


class _Bound(nn.Module):
    """`model(ids, *rest, **kwargs)` as a module of one argument, for `check_causal`."""

    def __init__(self, model: nn.Module, rest: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.model = model
        self.rest = rest
        self.kw = kwargs
        self.training = model.training

    def forward(self, ids: torch.Tensor) -> Any:
        return self.model(ids, *self.rest, **self.kw)


def _rows(x: Any, batch: int) -> Any:
    if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == batch:
        return x[:ROWS]
    return x


def probe(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], frame: UserFrame | None) -> Finding | None:
    """Run `check_causal` on the first rows of the step's batch; the finding placed at the user's
    call of the model."""
    from .._silent._sequence import check_causal

    ids = args[0]
    if not is_index_tensor(ids) or ids.dim() != 2 or ids.shape[1] < 4:
        return None
    batch = ids.shape[0]
    bound = _Bound(model, tuple(_rows(a, batch) for a in args[1:]), {k: _rows(v, batch) for k, v in kwargs.items()})
    modes = [(m, m.training) for m in model.modules()]
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state(ids.device) if ids.is_cuda else None
    try:
        report = check_causal(bound, ids[:ROWS])
    finally:
        for m, was in modes:
            m.training = was
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state(cuda_rng, ids.device)
    f = report.primary
    if f is None:
        return None
    ev = dict(f.evidence, probe="automatic: targets are the inputs shifted by one", rows_probed=min(ROWS, batch))
    ev.pop("source_line", None)
    if frame is not None and frame.source:
        ev["source_line"] = frame.source
    return f.replace(op=type(model).__name__, file=frame.file if frame else None, line=frame.line if frame else None,
                     cause=f"{f.cause}; {msg('silent.attention_sees_future.auto')}", evidence=ev)
