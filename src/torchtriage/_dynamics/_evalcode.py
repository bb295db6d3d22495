"""Evaluation and metric code: the `(N, 1)` vs `(N,)` outer broadcast outside the loss, and
softmax / argmax over the wrong dimension.

The silent check's loss region watches the loss code of the first training steps. Metric code
runs elsewhere: after a `no_grad` evaluation forward, or next to the loss
(`(out.argmax(1, keepdim=True) == y).float().mean()`). `MetricRegion` is the same kind of
pass-through `TorchFunctionMode`, pushed after a watched root's forward for the first
`dynamics_eval_passes` (3) evaluation forwards and the first `silent_warmup` (3) training
steps, and taken off at the next forward, backward, optimizer step or step end. While a model's
forward runs (session stage "forward") it passes ops through unchecked; it records at most 512
ops. It checks, by shapes only (no device read):

  * elementwise comparisons (==, !=, <, ...) always, arithmetic only after evaluation forwards
    (the loss region covers training arithmetic): the outer-broadcast pattern between a
    tensor computed from the model's output and one that is not (the labels), reported when a
    number (a 0-d tensor) was computed from its result — the metric as computed and with aligned
    shapes are read then (once per line); a mask built by broadcasting is not a metric;
  * on tensors computed from the model's output: softmax / log_softmax over a dimension of
    size 1 (constant output: constant loss, zero gradients) and softmax / log_softmax / argmax
    over dim 0 of a (batch, classes) tensor that is not square (a square one is a similarity
    matrix, where dim 0 is legitimate).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from .._findings import Finding, Severity, Stage
from .._frames import UserFrame, trims_errors, user_frame_from_stack
from .._silent._region import _BINARY, RegionMode, _op_name
from .._silent._shapes import outer_sample_broadcast
from ._common import finding, num
from ._constcompare import constant_compare, constant_finding
from ._ignored import Compare, candidate, padding_ids
from ._ignored import judge as judge_ignored

_T = torch.Tensor
_COMPARE = frozenset({
    torch.eq, _T.eq, _T.__eq__, torch.ne, _T.ne, _T.__ne__, torch.lt, _T.lt, _T.__lt__, torch.le, _T.le,
    _T.__le__, torch.gt, _T.gt, _T.__gt__, torch.ge, _T.ge, _T.__ge__,
})
_SOFTMAX = frozenset({torch.softmax, _T.softmax, F.softmax, torch.log_softmax, _T.log_softmax, F.log_softmax})
_ARGMAX = frozenset({torch.argmax, _T.argmax})
_NAMES = {"__eq__": "eq", "__ne__": "ne", "__lt__": "lt", "__le__": "le", "__gt__": "gt", "__ge__": "ge"}
MAX_OPS = 512


@dataclasses.dataclass
class MetricSuspect:
    index: int
    op: str
    a: tuple[int, ...]
    b: tuple[int, ...]
    lo: torch.Tensor
    hi: torch.Tensor
    result_shape: tuple[int, ...]
    frame: UserFrame | None


def dim_checks(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], batch: int | None) -> dict[str, Any] | None:
    """softmax over one unit, or softmax / argmax over the batch dimension: the finding's fields."""
    x = args[0] if args else kwargs.get("input")
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return None
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if not isinstance(dim, int):
        return None
    d = dim % x.dim()
    name = getattr(func, "__name__", "softmax")
    shp = tuple(x.shape)
    if func in _SOFTMAX and shp[d] == 1:
        return dict(name="silent.softmax_single_unit", op=name, dim=dim, shape=list(shp),
                    constant="0" if "log" in name else "1")
    if d == 0 and x.dim() == 2 and batch is not None and shp[0] == batch and shp[1] > 1 and shp[0] != shp[1]:
        return dict(name="silent.softmax_over_batch", op=name, dim=dim, shape=list(shp))
    return None


def node_checks(out: Any, batch: int | None) -> dict[str, Any] | None:
    """The same check on a model output's own softmax node (`nn.Softmax(dim=...)` in the model)."""
    node = getattr(out, "grad_fn", None)
    kind = type(node).__name__ if node is not None else ""
    if kind not in ("SoftmaxBackward0", "LogSoftmaxBackward0"):
        return None
    dim = getattr(node, "_saved_dim", None)
    if not isinstance(dim, int):
        return None
    if dim >= 1 << 63:  # autograd hands a negative saved dim back as its uint64 two's complement (issue 24)
        dim -= 1 << 64
    func = torch.softmax if kind == "SoftmaxBackward0" else torch.log_softmax
    return dim_checks(func, (out, dim), {}, batch)


class MetricRegion(RegionMode):
    """Watches the ops after a root forward; changes nothing (see the module docstring)."""

    def __init__(self, session: Any, batch: int | None, evaluation: bool, outputs: Any = None) -> None:
        super().__init__()
        self.session = session
        # ids of the model's outputs and of what the region saw computed from them: a metric
        # compares a prediction with a label; two tensors unrelated to the model (a mask built
        # from lengths and positions) are not checked
        self.derived = {id(t) for t in pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)}
        self.batch = batch
        self.evaluation = evaluation
        self.metric_suspects: list[MetricSuspect] = []
        self.dims: list[tuple[dict[str, Any], UserFrame | None]] = []
        # a prediction compared with integer targets: a metric that may count ignored positions (`_ignored.py`)
        self.compares: list[Compare] = []
        self.ignore: set[int] = set()  # the run's loss ignore_index values (set by the check)
        # a bool tensor compared with a number it can never equal (`(a == c) + (b == c)).eq(2)`)
        self.constants: list[tuple[dict[str, Any], UserFrame | None, str | None]] = []

    @trims_errors
    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not self.active or torch.compiler.is_compiling() or self.session.stage is Stage.FORWARD:
            # Counted as inside too: torch takes this mode off the stack while its handler runs,
            # and a `loss.backward()` passed through here makes the session leave the region
            # from within (`leave()` must then wait instead of searching the stack for it).
            self.inside += 1
            try:
                return func(*args, **kwargs)
            finally:
                self.inside -= 1
        real = self._unwrap.get(func, func)
        self.inside += 1
        try:
            out = real(*args, **kwargs)
        finally:
            self.inside -= 1
        if not self.active:
            return out
        try:
            if len(self.ops) >= MAX_OPS:
                self.active = False
                return out
            derived = self.derived
            from_model = [isinstance(a, torch.Tensor) and id(a) in derived for a in args[:2]]
            if any(from_model) or any(isinstance(v, torch.Tensor) and id(v) in derived for v in kwargs.values()):
                derived.update(id(t) for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor))
            if func in _COMPARE and len(self.constants) < 4:
                fields = constant_compare(func, args)
                if fields is not None:
                    made = next((f for f, _, _, o in reversed(self.ops) if o is args[0]), None)
                    self.constants.append((fields, user_frame_from_stack(2), _made_by(made, self.ops, args[0])))
            if (func in _COMPARE or (self.evaluation and func in _BINARY)) and len(args) >= 2:
                if from_model[0] != from_model[1]:  # a prediction against something else (the labels)
                    self._check(func, args[0], args[1], out)
                    if len(self.compares) < 8:
                        c = candidate(getattr(func, "__name__", ""), args[0], args[1], from_model, out,
                                      len(self.ops), user_frame_from_stack(2))
                        if c is not None:
                            self.compares.append(c)
            elif (func in _SOFTMAX or func in _ARGMAX) and from_model[0]:
                found = dim_checks(func, args, kwargs, self.batch)
                if found is not None:
                    self.dims.append((found, user_frame_from_stack(2)))
            self.ops.append((real, args, kwargs, out))
        except Exception:  # bookkeeping must never break the user's op
            self.active = False
        return out

    def _check(self, func: Any, a: Any, b: Any, out: Any) -> None:
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and isinstance(out, torch.Tensor)):
            return
        r = outer_sample_broadcast(tuple(a.shape), tuple(b.shape))
        if r is None:
            return
        lo, hi = (a, b) if a.dim() < b.dim() else (b, a)
        name = getattr(func, "__name__", str(func))
        self.metric_suspects.append(MetricSuspect(len(self.ops), _NAMES.get(name) or _op_name(func), tuple(a.shape),
                                                  tuple(b.shape), lo, hi, r, user_frame_from_stack(3)))

    # ------------------------------------------------------------------ verdicts
    @torch.no_grad()
    def outcome(self, s: MetricSuspect) -> tuple[float | None, float | None]:
        """The first scalar computed from the suspect's result, as computed and with aligned shapes."""
        env: dict[int, Any] = {id(s.lo): s.lo.reshape(s.hi.shape)}
        for func, args, kwargs, out in self.ops[s.index:]:
            leaves = pytree.tree_leaves((args, kwargs))
            if not any(isinstance(x, torch.Tensor) and id(x) in env for x in leaves):
                continue
            name = getattr(func, "__name__", "")
            if name.endswith("_") and not name.endswith("__") or name.startswith("__i"):
                return None, None  # an in-place op would touch the user's tensors
            a2, k2 = pytree.tree_map(lambda x: env.get(id(x), x) if isinstance(x, torch.Tensor) else x, (args, kwargs))
            with self.session.paused():
                new = func(*a2, **k2)
            for old_t, new_t in zip(pytree.tree_leaves(out), pytree.tree_leaves(new)):
                if isinstance(old_t, torch.Tensor):
                    env[id(old_t)] = new_t
            if isinstance(out, torch.Tensor) and out.dim() == 0 and isinstance(new, torch.Tensor) and new.dim() == 0:
                return float(out), float(new)
        return None, None

    def findings(self, step: int | None, reported: set[Any], defer: Any) -> list[Finding]:
        """The region's findings now; those that need numbers read are queued on `defer`."""
        found = []
        for s in self.metric_suspects:
            key = ("metric", s.op, s.frame)
            if key in reported:
                continue
            computed, aligned = self.outcome(s)
            if computed is None:
                # No number was computed from it: an (N, 1) vs (N,) comparison that builds a mask
                # (lengths[:, None] > positions with N == T by chance) is not a metric.
                continue
            reported.add(key)
            found.append(finding("silent.metric_broadcast", severity=Severity.ERROR, step=step, op=s.op, frame=s.frame,
                                 a=list(s.a), b=list(s.b), result=list(s.result_shape),
                                 evidence={"left_shape": s.a, "right_shape": s.b, "broadcast_shape": s.result_shape,
                                           "metric_computed": num(computed), "metric_aligned": num(aligned),
                                           "in": "evaluation" if self.evaluation else "training step"}))
        if self.compares:
            compares, self.compares = self.compares, []
            judge_ignored(self, compares, self.ignore, padding_ids(self.session.models), step, reported, defer)
        for fields, frame, made_by in self.constants:
            const_key = ("constant_comparison", frame)
            if const_key not in reported:
                reported.add(const_key)
                found.append(constant_finding(fields, frame, step, made_by))
        self.constants = []
        for fields, frame in self.dims:
            dim_key = (fields["name"], frame)
            if dim_key in reported:
                continue
            reported.add(dim_key)
            found.append(dim_finding(fields, frame, step))
        return found


def _made_by(func: Any, ops: list[Any], t: Any) -> str | None:
    """`add of two bool tensors (a logical or)` for the op that made `t`, when the region saw it."""
    if func is None:
        return None
    name = _op_name(func)
    args = next((a for f, a, _, o in reversed(ops) if o is t), ())
    bools = [a for a in args[:2] if isinstance(a, torch.Tensor) and a.dtype == torch.bool]
    if name in ("add", "__add__", "__radd__") and len(bools) == 2:
        return f"{name} of two bool tensors (a logical or, never 2)"
    return name


def dim_finding(fields: dict[str, Any], frame: UserFrame | None, step: int | None,
                module: str | None = None) -> Finding:
    fields = dict(fields)
    name = fields.pop("name")
    single = name.endswith("single_unit")
    ev = {"input_shape": tuple(fields["shape"]), "dim": fields["dim"]}
    if single:
        ev["output_is_always"] = fields["constant"]
    # over one unit: always wrong; over the batch: wrong for a classifier, deliberate in a few
    # batch-level normalizations (instance weights), so a warning
    severity = Severity.ERROR if single else Severity.WARNING
    return finding(name, severity=severity, stage=Stage.FORWARD if module is not None else None, step=step,
                   frame=frame, module=module, evidence=ev, **fields)
