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


def token_ids(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str | None, Any]:
    """The token ids of a model call and where they were passed: the first positional argument
    (key None), else `input_ids=` or the first (B, T) integer keyword argument (`model(**batch)`)."""
    if args:
        return None, args[0]
    if is_index_tensor(kwargs.get("input_ids")):
        return "input_ids", kwargs["input_ids"]
    for key, value in kwargs.items():
        if is_index_tensor(value) and value.dim() == 2:
            return key, value
    return None, None


class _Bound(nn.Module):
    """`model(ids, *rest, **kwargs)` (or `model(*rest, **kwargs, key=ids)`) as a module of one
    argument, for `check_causal`."""

    def __init__(self, model: nn.Module, key: str | None, rest: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.model = model
        self.key = key
        self.rest = rest
        self.kw = kwargs
        self.training = model.training

    def forward(self, ids: torch.Tensor) -> Any:
        if self.key is None:
            return self.model(ids, *self.rest, **self.kw)
        return self.model(*self.rest, **{**self.kw, self.key: ids})


def _rows(x: Any, batch: int) -> Any:
    if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == batch:
        return x[:ROWS]
    return x


def probe(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], frame: UserFrame | None) -> Finding | None:
    """Run `check_causal` on the first rows of the step's batch; the finding placed where the
    future first reached an earlier position (the user's line in the model), else at the user's
    call of the model."""
    from .._silent._sequence import causal_report, probe_state

    key, ids = token_ids(args, kwargs)
    if not is_index_tensor(ids) or ids.dim() != 2 or ids.shape[1] < 4:
        return None
    batch = ids.shape[0]
    rest = args[1:] if key is None else args
    bound = _Bound(model, key, tuple(_rows(a, batch) for a in rest),
                   {k: _rows(v, batch) for k, v in kwargs.items() if k != key})
    try:
        with probe_state(model, ids.device):
            report = causal_report(bound, ids[:ROWS], ids.shape[1] // 2 - 1, None, frame, names=model)
    except (TypeError, ValueError):  # an output with no logits per position: nothing to compare
        return None
    f = report.primary
    if f is None:
        return None
    ev = dict(f.evidence, probe="automatic: targets are the inputs shifted by one", rows_probed=min(ROWS, batch))
    if f.op == type(bound).__name__:
        f = f.replace(op=type(model).__name__)
    return f.replace(cause=f"{f.cause}; {msg('silent.attention_sees_future.auto')}", evidence=ev)
