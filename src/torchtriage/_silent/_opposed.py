"""The same input trained toward opposite targets in one step (session 14).

A loss that compares two sets of inputs run through the same weights (Forward-Forward's positive
and negative data, an energy model's data and samples, a contrastive loss's positives and
negatives) must not hold the same row in both: its two outputs are equal, and the loss pushes
one up and the other down, so their gradients cancel and the row teaches nothing but noise.
Negatives drawn as ``overlay(x, y[randperm(n)])`` keep about one row in ten equal to its
positive (its own label drawn back).

The model, on the warm-up backward: the step's applications of one set of weights to two
different inputs (two calls of a watched model; two taped ``mm`` / ``linear`` / ``conv`` ops on
the same parameter, as in a ``forward`` called directly). A strided sample of the second input's
rows (at most `SAMPLE`) is digested and looked up among the first input's rows, on the device.
A gradient hook on each output keeps the rows' gradients; for each pair of equal rows the cosine
of their two gradients is taken. All numbers ride the step's one read. The harm is measured: equal
rows whose gradients point opposite ways (cosine below `OPPOSED`), at least `MIN_ROWS` of them and
`MIN_SHARE` of the sampled rows, nearly all of the equal rows (`CONSISTENT`: a value target that moves
both ways by chance, as a TD target on states that recur as next states, is not a pattern). Equal
digests are confirmed cell by cell; rows with little content (under half the median number of
non-zero cells: the all-zero output of dead units) are not compared.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .._findings import Severity
from .._frames import UserFrame
from .._leakage._runtime._fingerprint import dense_keys, mix
from ._plans import Plan

SAMPLE = 1024  # rows of the second input looked up
MAX_ROWS = 1 << 16  # a first input with more rows is not digested (bounded cost)
MAX_PAIRS = 4  # pairs of applications judged per backward
OPPOSED = -0.5
MIN_ROWS = 8
MIN_SHARE = 0.01
CONSISTENT = 0.9
_SALT = 0x2545F4914F6CDD1D  # keeps a second input's digest apart from the first's
_APPLY = frozenset({"mm", "matmul", "__matmul__", "__rmatmul__", "linear", "addmm", "conv1d", "conv2d", "conv3d"})


@dataclasses.dataclass
class Use:
    """One application of a set of weights to a batch of rows."""

    key: int  # id of the model or the parameter
    name: str  # the model's label, or the parameter's name
    op: str  # the taped op, or the model's label
    module: str | None
    inp: torch.Tensor
    out: torch.Tensor
    frame: UserFrame | None
    more: tuple[torch.Tensor, ...] = ()  # the call's other per-row inputs (labels, masks)


def _param_of(t: Any) -> torch.Tensor | None:
    """The trained leaf a weight operand is (a parameter, a raw tensor that requires grad, or a
    view of one: `self.weight.T`)."""
    if not isinstance(t, torch.Tensor):
        return None
    if t.is_leaf and t.requires_grad:
        return t
    base = t._base
    return base if isinstance(base, torch.Tensor) and base.is_leaf and base.requires_grad else None


def _rows(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 2 and 2 <= t.shape[0] <= MAX_ROWS


def _out_ok(out: Any, inp: torch.Tensor) -> bool:
    """An output with a row per input row, each row a vector: a scalar per row (a value, an
    energy) has only a sign, which a target that moves with the data flips by chance."""
    return (isinstance(out, torch.Tensor) and out.grad_fn is not None and out.dim() >= 2
            and out.shape[0] == inp.shape[0] and out[0].numel() >= 2)


def uses(ops: list[Any], calls: list[Any], first: Any, info: Any) -> list[Use]:
    """The step's applications of weights to rows: taped ops on a parameter and watched model
    calls (with parameters) in training with gradients on, in order. `info(p)` is the session's
    `ParamInfo` of a parameter (its name, its model's label)."""
    found: list[Use] = []
    for c in calls:
        if not (c.grad_enabled and c.training and not c.inference):
            continue
        if next(c.model.parameters(), None) is None:
            continue  # an activation module: no weights of its own
        args = [a for a in (*c.args, *c.kwargs.values()) if isinstance(a, torch.Tensor)]
        inp = next((a for a in args if _rows(a)), None)
        out = first(c.output)
        if inp is not None and _out_ok(out, inp):
            more = tuple(a for a in args if a is not inp and a.dim() >= 1 and a.shape[0] == inp.shape[0])
            found.append(Use(id(c.model), c.label, c.label, c.label, inp, out, c.frame, more))
    for op in ops:
        if op.name not in _APPLY or not op.grad_enabled:
            continue
        tensors = [a for a in op.args if isinstance(a, torch.Tensor)]
        params = [p for t in tensors if (p := _param_of(t)) is not None and p.dim() >= 2]
        data = [t for t in tensors if _param_of(t) is None and _rows(t)]
        if len(params) != 1 or len(data) != 1 or not _out_ok(op.output, data[0]):
            continue
        pi = info(params[0])
        name = (f"{pi.label}.{pi.qualname}" if pi.label else pi.qualname) if pi is not None else op.name
        found.append(Use(id(params[0]), name, op.name, pi.label if pi is not None else None, data[0], op.output,
                         op.frame))
    return found


def pairs(found: list[Use]) -> list[tuple[Use, Use]]:
    """Consecutive applications of the same weights to two different inputs of the same row width."""
    by: dict[int, list[Use]] = {}
    for u in found:
        by.setdefault(u.key, []).append(u)
    out: list[tuple[Use, Use]] = []
    for group in by.values():
        for a, b in zip(group, group[1:]):
            if a.out is b.out or a.inp.shape[1:] != b.inp.shape[1:] or len(a.more) != len(b.more):
                continue
            if all(_same(s, t) for s, t in zip((a.inp, *a.more), (b.inp, *b.more))):
                continue  # the same batch run twice (two dropout masks, R-Drop): one input
            out.append((a, b))
    return out[:MAX_PAIRS]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride())


def _keys(u: Use, rows: torch.Tensor | None = None) -> torch.Tensor:
    """One digest per row of all of a use's per-row inputs."""
    pick = (lambda t: t) if rows is None else (lambda t: t.index_select(0, rows.to(t.device)))
    k = dense_keys(pick(u.inp))
    for t in u.more:
        k = mix(k ^ (dense_keys(pick(t)).to(k.device) + _SALT))
    return k


class Probe:
    """One pair of applications: the rows of `b` equal to rows of `a`, and the cosines of their
    gradients, filled by the outputs' gradient hooks into `values` (no read)."""

    def __init__(self, a: Use, b: Use) -> None:
        self.a, self.b = a, b
        nb = b.inp.shape[0]
        dev = b.out.device
        with torch.no_grad():
            self.rows_b = torch.linspace(0, nb - 1, min(nb, SAMPLE), device=b.inp.device).round().to(torch.int64)
            ka = _keys(a)
            kb = _keys(b, self.rows_b).to(ka.device)
            order = torch.argsort(ka)
            sk = ka[order]
            pos = torch.searchsorted(sk, kb).clamp_(max=sk.numel() - 1)
            # a row with little content (dead units: all zeros after a ReLU) equals many rows by
            # saying nothing; under half the median count of non-zero cells is not compared
            nz = (b.inp.index_select(0, self.rows_b).flatten(1) != 0).sum(1)
            self.match = (sk[pos] == kb) & (2 * nz >= nz.median()).to(kb.device) & (nz > 0).to(kb.device)
            self.rows_a = order[pos]
            # digests of wide rows read a sample of their cells: equal digests are confirmed cell by cell
            for ta, tb in zip((a.inp, *a.more), (b.inp, *b.more)):
                ra = ta.index_select(0, self.rows_a.to(ta.device)).reshape(self.rows_a.numel(), -1)
                rb = tb.index_select(0, self.rows_b.to(tb.device)).reshape(self.rows_b.numel(), -1).to(ra.device)
                self.match &= (ra == rb).all(1).to(self.match.device)
        self.values = torch.zeros(4, dtype=torch.float64, device=dev)
        self.values[0] = float(self.rows_b.numel())
        self.grads: dict[str, torch.Tensor] = {}
        self.handles = [a.out.register_hook(self._hook("a")), b.out.register_hook(self._hook("b"))]

    def _hook(self, side: str) -> Any:
        def hook(grad: torch.Tensor) -> None:
            try:
                with torch.no_grad():
                    rows = self.rows_a if side == "a" else self.rows_b
                    self.grads[side] = grad.detach().index_select(0, rows.to(grad.device)).flatten(1).to(torch.float64)
                    if len(self.grads) == 2:
                        self._measure()
            except Exception:  # our bug never stops the user's backward
                self.grads.clear()

        return hook

    def _measure(self) -> None:
        ga, gb = self.grads["a"], self.grads["b"].to(self.grads["a"].device)
        na, nb = ga.norm(dim=1), gb.norm(dim=1)
        live = self.match.to(ga.device) & (na > 0) & (nb > 0)
        cos = (ga * gb).sum(1) / (na * nb).clamp_min(1e-300)
        opposed = live & (cos < OPPOSED)
        v = self.values
        v[1] = live.sum().to(v.device)
        v[2] = opposed.sum().to(v.device)
        v[3] = torch.where(opposed, cos, torch.zeros_like(cos)).sum().to(v.device) / opposed.sum().clamp_min(1)
        self.grads.clear()

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        self.grads.clear()

    def plan(self) -> Plan:
        a, b = self.a, self.b

        def judge(v: list[float]) -> dict[str, Any] | None:
            sampled, equal, opposed, cos = int(v[0]), int(v[1]), int(v[2]), v[3]
            if opposed < MIN_ROWS or opposed < MIN_SHARE * sampled or opposed < CONSISTENT * equal:
                return None
            share = opposed / max(sampled, 1)
            return {"name": "opposite_targets", "severity": Severity.WARNING, "family": "data",
                    "count": opposed, "sampled": sampled, "share": f"{100 * share:.1f}%", "first": a.name,
                    "cosine": f"{cos:.2f}",
                    "evidence": {"rows_sampled": sampled, "rows_equal": equal, "rows_opposed": opposed,
                                 "share_opposed": round(share, 4), "mean_gradient_cosine": round(cos, 4),
                                 "first_input_rows": int(a.inp.shape[0]), "second_input_rows": int(b.inp.shape[0]),
                                 "first_input_at": f"{a.frame.file}:{a.frame.line}" if a.frame else "?",
                                 "weights": a.name},
                    "module": b.module}

        return Plan(list(self.values.unbind(0)), judge)
