"""A loss term normalized by the batch size twice (session 12).

A term reduced over the batch is a mean when it is divided by the batch size once: ``l.mean()``,
``l.sum() / B``, ``(l / B).sum()``, ``F.l1_loss(p, y)``. Dividing it once more
(``speed = v / B; total = a.sum() / B + speed.sum() / B``, ``F.mse_loss(p, y) / x.size(0)``)
runs, raises nothing and only scales: the term enters the total with 1/B of the weight the
code configures, its gradient into every shared parameter is B times too small, and a weight
written next to it (``0.05 * speed``) no longer means what it says.

The model, read on the warm-up steps' tape (the ops outside the watched models that feed the
tensor given to backward): each tensor carries how many dimensions of the batch were reduced
(``sum`` / ``mean`` / a loss's reduction over a dimension whose size is a multiple of B) and how
many times it was divided by B (a division by the number B, a product with 1 / B, a ``mean``,
a loss's ``mean`` reduction). Only linear ops carry the counts (a sum, a difference, a product,
an index, a view, a stack): a division before a nonlinear op (logits / temperature) scales no
term. At the backward root, a term whose divisions exceed its reduced batch dimensions, with at
least one explicit division by B, is divided once too often. Harm measured with the step's read:
the term's value and the loss's, and the term's value at the weight the code gives it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from .._findings import Severity, Stage
from ._plans import Plan

MIN_BATCH = 4  # a smaller divisor is too often another constant (2 for a symmetric loss)
_DIV = frozenset({"div", "__truediv__", "true_divide", "divide", "__itruediv__", "div_"})
_MUL = frozenset({"mul", "__mul__", "__rmul__", "multiply", "__imul__", "mul_"})
_REDUCE = frozenset({"sum", "nansum"})
_MEAN = frozenset({"mean", "nanmean"})
_LINEAR = frozenset({"add", "__add__", "__radd__", "add_", "__iadd__", "sub", "__sub__", "__rsub__", "sub_",
                     "__isub__", "neg", "__neg__", "__getitem__", "view", "reshape", "flatten", "squeeze",
                     "unsqueeze", "select", "index_select", "masked_select", "stack", "cat", "concat", "clone",
                     "contiguous", "to", "float", "double", "transpose", "permute", "t", "expand", "expand_as",
                     "view_as", "reshape_as", "narrow", "gather", "sum_to_size"}) | _MUL | _DIV
_JOIN = frozenset({"add", "__add__", "__radd__", "add_", "__iadd__", "sub", "__sub__", "__rsub__", "sub_",
                   "__isub__", "stack", "cat", "concat"})  # ops that put terms together
_LOSSES = frozenset({"l1_loss", "mse_loss", "smooth_l1_loss", "huber_loss", "cross_entropy", "nll_loss",
                     "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "soft_margin_loss",
                     "poisson_nll_loss", "gaussian_nll_loss", "multilabel_soft_margin_loss"})


class _State:
    __slots__ = ("divs", "reduced", "frames", "explicit", "term", "mixed")

    def __init__(self, divs: int = 0, reduced: int = 0, frames: tuple[Any, ...] = (), explicit: int = 0,
                 term: Any = None, mixed: bool = False) -> None:
        self.divs, self.reduced, self.frames, self.explicit, self.term = divs, reduced, frames, explicit, term
        self.mixed = mixed  # added to a batch-reduced term normalized once: its weight is relative

    @property
    def excess(self) -> int:
        return self.divs - self.reduced


def _tensors(x: Any) -> list[torch.Tensor]:
    try:
        return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]
    except Exception:
        return []


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)


def _batch_dims(t: torch.Tensor, dims: Any, batch: int) -> int:
    """Dimensions of `t` reduced by `dims` (None: all) whose size is a multiple of the batch."""
    if t.dim() == 0:
        return 0
    if dims is None:
        picked = list(range(t.dim()))
    else:
        picked = [dims] if isinstance(dims, int) else list(dims) if isinstance(dims, (list, tuple)) else []
    n = 0
    for d in picked:
        if not isinstance(d, int) or not -t.dim() <= d < t.dim():
            return 0
        size = t.shape[d]
        n += bool(size and size % batch == 0)
    return n


def _dims_of(op: Any) -> Any:
    dims = op.kwargs.get("dim", op.kwargs.get("axis"))
    if dims is None and len(op.args) > 1 and not isinstance(op.args[1], (bool, torch.dtype)):
        dims = op.args[1]
    return dims


def _transfer(op: Any, name: str, states: dict[int, _State], batch: int) -> _State | None:
    """The state of the op's output, or None when it carries none."""
    args = op.args
    ins = [states[id(t)] for t in _tensors((args, op.kwargs)) if id(t) in states]
    base = max(ins, key=lambda s: (s.excess, s.reduced), default=None)
    x = args[0] if args else None
    if name in _LOSSES and isinstance(x, torch.Tensor):
        target = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else x
        reduction = op.kwargs.get("reduction", "mean")
        n = _batch_dims(target, None, batch)
        if reduction == "batchmean":
            return _State(1, n, (op.frame,), 0) if n else None
        if reduction in ("mean", "sum") and n:
            return _State(n if reduction == "mean" else 0, n, (op.frame,), 0)
        return None
    if name in _REDUCE or name in _MEAN:
        if not isinstance(x, torch.Tensor):
            return base
        n = _batch_dims(x, _dims_of(op), batch)
        s = base or _State()
        if not n:
            return base
        mean = n if name in _MEAN else 0
        return _State(s.divs + mean, s.reduced + n, s.frames + ((op.frame,) if mean else ()), s.explicit, s.term,
                      s.mixed)
    if name in _DIV or name in _MUL:
        other = args[1] if len(args) > 1 else op.kwargs.get("other")
        c = _number(other)
        if isinstance(x, torch.Tensor) and c is not None and c != 0:
            s = base or _State()
            scale = c if name in _DIV else 1.0 / c
            if abs(scale - batch) < 1e-6:
                return _State(s.divs + 1, s.reduced, s.frames + (op.frame,), s.explicit + 1, s.term, s.mixed)
            if abs(scale * batch - 1) < 1e-6:
                return _State(s.divs - 1, s.reduced, s.frames, s.explicit, s.term, s.mixed)
        return base
    if name in _LINEAR:
        if name in _JOIN and base is not None and base.excess > 0 and not base.mixed and any(
                s.reduced > 0 and s.excess <= 0 for s in ins):
            return _State(base.divs, base.reduced, base.frames, base.explicit, base.term, True)
        return base
    return None  # a nonlinear op: a scale before it is no term's weight


def twice_plans(ops: list[Any], root: torch.Tensor, batch: int) -> list[tuple[Plan, Any]]:
    """(plan, frame) for a term of `root` divided by the batch size once too often (at most one)."""
    if batch < MIN_BATCH or root.numel() != 1:
        return []
    states: dict[int, _State] = {}
    for op in ops:
        name = op.name.rsplit(".", 1)[-1]
        try:
            s = _transfer(op, name, states, batch)
        except Exception:
            continue
        outs = _tensors(op.output)
        if s is None:
            for t in outs:
                states.pop(id(t), None)
            continue
        if s.excess > 0 and s.reduced > 0 and s.term is None and s.explicit > 0 and outs:
            s = _State(s.divs, s.reduced, s.frames, s.explicit, outs[0], s.mixed)  # the term, first over-divided
        for t in outs:
            states[id(t)] = s
    s = states.get(id(root))
    if s is None or s.excess <= 0 or s.reduced <= 0 or s.explicit <= 0 or not s.mixed \
            or not isinstance(s.term, torch.Tensor) or s.term.numel() != 1:
        return []  # (a loss that is one term divided twice is only rescaled: the learning rate absorbs it)
    frames = [f for f in s.frames if f is not None]
    if not frames:
        return []
    term = s.term.detach().reshape(()).abs().float()
    total = root.detach().reshape(()).abs().float()
    extra = s.excess
    lines = sorted({f.line for f in frames})

    def judge(vals: list[float]) -> dict[str, Any] | None:
        value, whole = vals
        intended = value * batch ** extra
        return dict(name="loss_term_divided_twice", severity=Severity.WARNING, stage=Stage.LOSS,
                    batch=batch, times=s.divs, reduced=s.reduced, lines=", ".join(map(str, lines)),
                    factor=batch ** extra, value=f"{value:.4g}", intended=f"{intended:.4g}", loss=f"{whole:.4g}",
                    evidence={"batch_size": batch, "divisions_by_batch": s.divs, "batch_dims_reduced": s.reduced,
                              "division_lines": lines, "term_value": value, "term_value_divided_once": intended,
                              "loss_value": whole, "term_weight_factor": 1.0 / batch ** extra,
                              "term_share_of_loss": round(value / whole, 6) if whole > 0 else None,
                              "share_divided_once": round(intended / (whole - value + intended), 6)
                              if whole - value + intended > 0 else None})
    return [(Plan([term, total], judge), frames[-1])]


def batch_of(calls: list[Any]) -> int:
    """The batch size of the step: the leading dimension of its first training model call's input."""
    for call in calls:
        if not getattr(call, "grad_enabled", True) or not getattr(call, "training", True):
            continue
        for t in _tensors((call.args, call.kwargs)):
            if t.dim() >= 1:
                return int(t.shape[0])
    return 0
