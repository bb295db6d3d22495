"""Rows of a loss target overwritten with fresh random noise (`silent.target_overwritten_with_noise`).

A corruption meant for the input (condition dropout, noising, masking) written in place into
the batch tensor that is then also the loss target: `x[i] = torch.randn_like(x[i])` on the
clean signal, then `loss(x, model(...))`. Those rows ask the model to output noise drawn after
its inputs were made from it, or unrelated to them: targets it cannot learn, and the clean
rows it should have learned are gone.

Read off the step tape when a loss is called (no tensor is read but a boolean key's count): the
target entered the step as data (no op on the tape made it) and, before the model call, an
indexed assignment wrote into it a value the tape drew at random (`randn`, `rand`, `normal`,
`randn_like`, ...) on some of its rows but not all (every row replaced is a target made of noise
on purpose, as a diffusion model's noise target).
"""

from __future__ import annotations

from typing import Any

import torch

from .._findings import Severity
from ._plans import Plan, Verdict

_RANDOM = frozenset({"randn", "randn_like", "rand", "rand_like", "normal", "normal_", "uniform_", "bernoulli"})
_TAKES = frozenset({"__getitem__", "__mul__", "__rmul__", "mul", "__add__", "__radd__", "add", "to", "view",
                    "reshape", "expand_as", "clone"})


def _same_data(a: Any, b: Any) -> bool:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    try:
        return a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.data_ptr() != 0)
    except Exception:  # a tensor without storage
        return False


def _drawn(t: Any, producers: dict[int, Any], depth: int = 3) -> str | None:
    """The random op that drew `t` on the tape (through a few scalings and reshapes)."""
    for _ in range(depth):
        op = producers.get(id(t))
        if op is None:
            return None
        if op.name in _RANDOM:
            return op.name
        if op.name not in _TAKES or not op.args:
            return None
        t = op.args[0]
    return None


def noise_rows_plan(ops: list[Any], target: torch.Tensor) -> Plan | None:
    """Were rows of `target` (a batch tensor) overwritten on the tape with random noise?"""
    if not isinstance(target, torch.Tensor) or not target.is_floating_point() or target.dim() < 2 \
            or target.shape[0] < 2:
        return None
    producers = {id(op.output): op for op in ops if isinstance(op.output, torch.Tensor)}
    if _drawn(target, producers) is not None:
        return None  # drawn on the tape whole (a noise target built on purpose)
    n = target.shape[0]
    rows: set[int] = set()
    counts: list[torch.Tensor] = []
    frame, drawn = None, None
    for op in ops:
        if op.name != "__setitem__" or not op.before_step or len(op.args) < 3 or not _same_data(op.args[0], target):
            continue
        how = _drawn(op.args[2], producers)
        if how is None:
            continue
        key = op.args[1]
        key = key[0] if isinstance(key, tuple) and key else key
        if isinstance(key, int) and not isinstance(key, bool):
            rows.add(key % n)
        elif isinstance(key, torch.Tensor) and key.dtype == torch.bool and key.dim() == 1 and key.shape[0] == n:
            counts.append(key.sum())
        else:
            continue
        frame, drawn = frame or op.frame, drawn or how
    if frame is None:
        return None
    values = [torch.stack(counts).amax().float()] if counts else [torch.zeros(())]

    def judge(v: list[float]) -> Verdict | None:
        k = max(len(rows), int(v[0]))
        if not 1 <= k < n:
            return None
        return dict(name="target_overwritten_with_noise", severity=Severity.WARNING, rows=k, n=n, op=drawn,
                    _frame=frame, evidence={"target_shape": list(target.shape), "rows_overwritten": k,
                                            "rows": n, "drawn_by": drawn,
                                            "overwrite_line": getattr(frame, "line", None)})

    return Plan(values, judge)
