"""A plain mean over a loss that a padding mask has zeroed: `(loss * mask).mean()`.

The invariant: a loss over a padded batch is an average over the real positions. Multiplying
the per-position loss by the batch's padding mask zeroes the padded positions but leaves them
in the element count, so `.mean()` divides the real positions' sum by every position, padded
ones included: the loss (and its gradient) is the masked mean times the batch's valid fraction,
which changes from batch to batch with the padding. The fix divides by `mask.sum()`.

The model: every taped full `mean` of the step (no `dim`) that feeds the tensor given to
backward() and whose input is the output of an elementwise multiplication by a mask of the
padding kind: values 0 and 1 only, and along one axis every line is its real positions first
and its padding after (a right-padded batch: 1...1 0...0), with lines of different lengths and
at least one padded position. A random mask (dropout, masked-token sampling) is not a prefix
along any axis; a triangular (causal) mask, or a batch of them, is excluded by its lengths
(each of 1, 2, ..., T, equally often).

Measured on the step's tensors with the step's one read: the valid fraction (mask mean) and
the prefix structure. A warning when the padded positions are at least `_MIN_PAD` of the
positions averaged over: the loss the optimizer sees is scaled by that fraction.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from .._findings import Severity, Stage
from ._common import first_tensor, is_index_tensor, same_storage, shape
from ._divisor import _feeds
from ._plans import Plan, Verdict

_MEAN = frozenset({"mean"})
_MULS = frozenset({"mul", "__mul__", "__rmul__", "multiply"})
_MIN_PAD = 0.1  # padded share of the averaged positions from which the scale is a warning
_MAX = 8  # means judged per backward


def _producer(ops: list[Any], upto: int, t: torch.Tensor) -> int | None:
    for j in range(upto - 1, -1, -1):
        if ops[j].output is t:
            return j
    return None


def _full_mean(op: Any) -> torch.Tensor | None:
    """The input of a `mean` over every element, else None."""
    if op.name not in _MEAN or not op.args or not isinstance(op.args[0], torch.Tensor):
        return None
    if len(op.args) > 1 or op.kwargs.get("dim") is not None:
        return None
    x = op.args[0]
    return x if x.is_floating_point() and x.numel() >= 4 else None


def _mask_of(mul: Any, x: torch.Tensor) -> torch.Tensor | None:
    """The operand of `mul` that can be a padding mask of the product `x`: no gradient, of the
    product's number of dimensions (or fewer, broadcast), two or more positions."""
    if len(mul.args) != 2:
        return None
    for i, m in enumerate(mul.args):
        other = mul.args[1 - i]
        if not isinstance(m, torch.Tensor) or not isinstance(other, torch.Tensor):
            continue
        if m.requires_grad or m.dim() == 0 or m.numel() < 4 or m.is_complex():
            continue
        if m.dim() > x.dim() or torch.broadcast_shapes(m.shape, x.shape) != x.shape:
            continue
        if other.requires_grad or other.grad_fn is not None:
            return m
    return None


def padmean_plans(ops: list[Any], root: torch.Tensor, judged: frozenset[int] | set[int] = frozenset()
                  ) -> list[tuple[Plan, Any]]:
    """(plan, frame) for each taped full mean of a masked product that feeds `root`."""
    found: list[tuple[Plan, Any]] = []
    for i, op in enumerate(ops):
        if len(found) >= _MAX:
            break
        if id(op) in judged:
            continue
        x = _full_mean(op)
        if x is None:
            continue
        j = _producer(ops, i, x)
        if j is None or ops[j].name not in _MULS:
            continue
        m = _mask_of(ops[j], x)
        if m is None or not isinstance(op.output, torch.Tensor) or not _feeds(ops, i, op.output, root):
            continue
        plan = _plan(m, x)
        if plan is not None:
            found.append((plan, op.frame or ops[j].frame))
    return found


def _plan(m: torch.Tensor, x: torch.Tensor) -> Plan | None:
    """Values: is the mask 0/1, its mean, then per axis (prefix along it, lines with padding,
    distinct line lengths, lengths that are 1..T in order)."""
    mf = m.detach().float()
    axes = [a for a in range(mf.dim()) if mf.shape[a] >= 2]
    if not axes:
        return None
    vals = [((mf == 0) | (mf == 1)).all().float(), mf.mean()]
    for a in axes:
        n = mf.shape[a]
        rises = (mf.narrow(a, 1, n - 1) > mf.narrow(a, 0, n - 1)).any()
        lengths = mf.sum(a).flatten()
        partial = ((lengths > 0) & (lengths < n)).float().sum()
        spread = lengths.amax() - lengths.amin()
        # a triangular mask (one or a batch of them): every length 1..n, each as often
        counts = torch.bincount(lengths.long().clamp(0, n), minlength=n + 1)
        tri = ((counts[1:] == counts[1]).all() & (counts[0] == 0) & (counts[1] > 0)).float()
        vals += [rises.float(), partial, spread, tri]
    mshape, xshape = shape(m), shape(x)

    def judge(v: list[float]) -> Verdict | None:
        binary, valid = v[0], v[1]
        if binary < 1 or not 0 < valid <= 1 - _MIN_PAD:
            return None
        for k, a in enumerate(axes):
            rises, partial, spread, tri = v[2 + 4 * k: 6 + 4 * k]
            if rises > 0 or partial < 1 or spread < 1 or tri > 0:
                continue
            pad = 1 - valid
            return dict(name="mean_over_padding", severity=Severity.WARNING, stage=Stage.LOSS,
                        valid=f"{valid:.0%}", padded=f"{pad:.0%}",
                        evidence={"masked_tensor_shape": xshape, "mask_shape": mshape, "padded_axis": a,
                                  "valid_fraction": round(valid, 6), "padded_fraction": round(pad, 6),
                                  "rows_with_padding": int(partial),
                                  "loss_scale_vs_masked_mean": round(valid, 6)})
        return None

    return Plan(vals, judge)


_POSITION_LOSSES = frozenset({"binary_cross_entropy", "binary_cross_entropy_with_logits",
                              "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"})


def _token_grid(call: Any, n: int) -> torch.Tensor | None:
    """The one (B, T) integer tensor among a model call's arguments whose positions are the
    `n` positions of its output (B * T == n, B the output's first size)."""
    out = first_tensor(call.output)
    if not isinstance(out, torch.Tensor) or out.dim() < 2:
        return None
    try:
        leaves = pytree.tree_leaves((call.args, call.kwargs))
    except Exception:
        return None
    grids = [t for t in leaves if is_index_tensor(t) and t.dim() == 2 and t.shape[1] >= 3
             and t.shape[0] == out.shape[0] and t.numel() == n and tuple(out.shape[:2]) == tuple(t.shape)]
    return grids[0] if len(grids) == 1 else None


def position_loss_plan(name: str, inp: Any, reduction: Any, weighted: bool, calls: list[Any]) -> Plan | None:
    """A per-position loss (`nn.BCELoss()`, `F.mse_loss`) with the mean reduction on the outputs
    of a model call that read right-padded token ids: the padded positions (the id that ends the
    rows and sits nowhere else) are averaged in with the real ones."""
    if name not in _POSITION_LOSSES or reduction != "mean" or weighted or not isinstance(inp, torch.Tensor):
        return None
    if not inp.is_floating_point() or not inp.requires_grad or inp.numel() < 8:
        return None
    for call in reversed(calls):
        out = first_tensor(call.output)
        if not isinstance(out, torch.Tensor) or out.numel() != inp.numel() or not same_storage(inp, out):
            continue
        ids = _token_grid(call, inp.numel())
        return None if ids is None else _grid_plan(ids)
    return None


def _grid_plan(ids: torch.Tensor) -> Plan:
    """Values: the candidate pad id (the last column's mode), the share of rows ending in it, the
    share of its occurrences in the rows' trailing runs, the padded share, the run lengths' spread."""
    cand = torch.mode(ids[:, -1]).values
    is_cand = ids == cand
    run = is_cand.flip(-1).int().cumprod(-1).flip(-1).bool()
    lengths = run.sum(1)
    vals = [cand.float(), (ids[:, -1] == cand).float().mean(), run.sum().float() / is_cand.sum().clamp_min(1),
            run.float().mean(), (lengths.amax() - lengths.amin()).float()]
    ishape = shape(ids)

    def judge(v: list[float]) -> Verdict | None:
        pad_id, at_end, placed, padded, spread = v
        if at_end < 0.5 or placed < 0.99 or padded < _MIN_PAD or spread < 1:
            return None
        return dict(name="mean_over_padding", variant="tokens", severity=Severity.WARNING, stage=Stage.LOSS,
                    valid=f"{1 - padded:.0%}", padded=f"{padded:.0%}", pad=int(pad_id),
                    evidence={"input_ids_shape": ishape, "pad_id": int(pad_id), "padded_fraction": round(padded, 6),
                              "valid_fraction": round(1 - padded, 6), "rows_ending_in_pad": round(at_end, 6),
                              "loss_scale_vs_masked_mean": round(1 - padded, 6)})

    return Plan(vals, judge)
