"""`NonFiniteSentinel`: the always-on check for the first non-finite value of a step.

Hot path (every step, no per-tensor sync): one on-device reduction per boundary —
    data       sum of each floating batch tensor  (NaN or +Inf trips; -Inf masks do not)
    forward    sum of each floating root output   (same rule)
    loss       the backward roots                 (any non-finite value trips)
    backward   global L2 norm of the gradients, `torch._foreach_norm` (also the "grad_norm" series)
    optimizer  L2 norm of each parameter and optimizer state tensor after the update, one
               `torch._foreach_norm` call (read at the next sync)
Every flag is a 0-dim tensor kept as is (no per-flag conversion or pre-reduction: on a small
step each extra op costs as much as the reduction itself). All flags of a step are stacked once
and read with ONE host transfer, at `optimizer.step()`'s pre-hook
(before the update: a non-finite update can still be skipped), or at backward's end without an
optimizer. Intermediate modules are not checked: NaN/Inf propagate to one of these boundaries,
and the replay (`_localize`) finds where they were born.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import torch
import torch.nn as nn

from .. import _deferred
from .._catalogue import msg
from .._checker import Checker, LossCall
from .._config import OnAnomaly
from .._findings import Category, Finding, Severity, Stage
from .._frames import UserFrame, user_frame_from_stack
from . import _amp, _localize
from ._replay import float_leaves, graph_nodes, saved_tensors
from ._trace import nonfinite

MAX_REPLAYS = 3  # a run that stays NaN would otherwise replay every step


@dataclasses.dataclass
class _Step:
    keys: list[str] = dataclasses.field(default_factory=list)  # kind of each flag, in order
    flags: list[torch.Tensor] = dataclasses.field(default_factory=list)  # 0-dim device scalars
    outputs: list[torch.Tensor] = dataclasses.field(default_factory=list)
    output_nodes: list[Any] = dataclasses.field(default_factory=list)
    loss_calls: list[LossCall] = dataclasses.field(default_factory=list)
    loss_nodes: list[tuple[int, str, dict[str, torch.Tensor]]] = dataclasses.field(default_factory=list)
    autocast: list[tuple[str, torch.dtype]] = dataclasses.field(default_factory=list)
    backward_frame: UserFrame | None = None
    loss_value: float | None = None
    loss_sites: list[Any] = dataclasses.field(default_factory=list)  # (file, line) of each loss flag
    seen_forward: bool = False


def _sum(t: torch.Tensor) -> torch.Tensor:
    if t.dtype is torch.float32:
        return t.detach().sum()  # the common case, without the keyword's parsing
    x = t.detach()
    if x.is_complex():
        x = torch.view_as_real(x)
    return x.sum(dtype=torch.float32) if x.dtype != torch.float64 else x.sum()


_LOW = (torch.float16, torch.bfloat16)


def foreach_norm(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor's L2 norm, one foreach call per precision. float16 / bfloat16 norms are
    returned in float32: a finite half tensor's norm can exceed 65504 (a pure-half model's
    large parameter, its gradient), and an Inf norm there would read as a non-finite value."""
    low = [t.dtype in _LOW for t in tensors]
    if not any(low):
        return list(torch._foreach_norm(tensors))
    try:
        if all(low):
            return list(torch._foreach_norm(tensors, 2, dtype=torch.float32))
        out: list[Any] = [None] * len(tensors)
        for want in (True, False):
            idx = [i for i, is_low in enumerate(low) if is_low is want]
            kw = {"dtype": torch.float32} if want else {}
            for i, n in zip(idx, torch._foreach_norm([tensors[i] for i in idx], 2, **kw)):
                out[i] = n
        return out
    except TypeError:  # torch without foreach_norm's dtype (< 2.5): half norms as they are
        return list(torch._foreach_norm(tensors))


def _norms(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The L2 norm over all tensors, one device scalar per device holding some (foreach groups
    them per device and dtype). Combining devices on the device would need a copy to one of
    them, and a blocking CPU→CUDA copy syncs: the host combines them after the step's read."""
    tensors = [t for t in tensors if t.numel() and not t.is_sparse]
    if not tensors:
        return []
    norms = foreach_norm(tensors)
    try:
        stacked = torch.stack(norms)  # all float32 on one device: as is
    except RuntimeError:  # several devices
        by_dev: dict[torch.device, list[torch.Tensor]] = {}
        for n in norms:
            by_dev.setdefault(n.device, []).append(n.to(torch.float32))
        return [torch.linalg.vector_norm(torch.stack(ns)) for ns in by_dev.values()]
    if stacked.dtype != torch.float32:
        stacked = stacked.to(torch.float32)
    return [torch.linalg.vector_norm(stacked)]


class NonFiniteSentinel(Checker):
    """Detects the first NaN/Inf of a training step and localizes it (stage, module, op, line).

    Attached by default in `torchtriage.watch` and `torchtriage run` (check name "nonfinite").
    With `on_anomaly="skip_step"` it keeps the optimizer from applying a step whose loss or
    gradients are non-finite: parameters and optimizer state stay bitwise unchanged.

    Example:
        >>> with torchtriage.watch(model, opt, checks=["nonfinite"]) as s:
        ...     train(model, opt)
        >>> s.report.primary.op
        'aten::log'
    """

    name = "nonfinite"

    def __init__(self) -> None:
        super().__init__()
        self._step = _Step()
        # Per-tensor norms of the last update's parameters and optimizer state (0-dim tensors,
        # read at the next sync), how many of them are parameters, its step, grads finite then.
        self._after: tuple[list[torch.Tensor], int, int, bool] | None = None
        self._replays = 0
        self._by_stage: dict[str, Finding] = {}
        self._stashed: dict[int, list[tuple[torch.Tensor, torch.Tensor | None]]] = {}
        self._grad_norm: float | None = None
        # Set once a non-finite value was localized and then applied by the optimizer: every later
        # trip is its consequence (NaN parameters), counted on the first finding, not replayed.
        self._poisoned: Finding | None = None
        self._first: Finding | None = None
        self._loss_series: dict[Any, str] = {}
        self.amp = _amp.ScalerWatch(self)

    # ------------------------------------------------------------------ lifecycle
    def on_start(self, session: Any) -> None:
        self.amp.install(session)

    def on_step_begin(self, step: int) -> None:
        self._step = _Step()

    def _add_sums(self, kind: str, tensors: list[torch.Tensor]) -> None:
        # One flag per tensor: a NaN or +Inf in any of them is one in their sum too, so summing
        # the sums on the device would only add ops (the host reads them all at once anyway).
        keys, flags = self._step.keys, self._step.flags
        for t in tensors:
            if t.numel():
                keys.append(kind)
                flags.append(_sum(t))

    def on_root_forward(self, model: nn.Module, label: str, args: tuple[Any, ...],
                        kwargs: dict[str, Any], output: Any) -> None:
        st = self._step
        if not st.seen_forward:
            st.seen_forward = True
            self._add_sums("data", float_leaves((args, kwargs)))
            st.autocast = [(d, torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")
                           if torch.is_autocast_enabled(d)]
        outs = float_leaves(output)
        self._add_sums("forward", outs)
        st.outputs.extend(outs)
        st.output_nodes.extend(t.grad_fn for t in outs if t.grad_fn is not None)

    def on_loss(self, call: LossCall) -> None:
        self._step.loss_calls.append(call)

    def on_backward(self, roots: tuple[torch.Tensor, ...], grads: Any) -> None:
        st = self._step
        floats = [r for r in roots if isinstance(r, torch.Tensor) and (r.is_floating_point() or r.is_complex())]
        if not floats:
            return
        root = self.amp.unscaled(floats[0])
        value = _sum(root) if root.numel() == 1 else None
        st.backward_frame = user_frame_from_stack(3)
        if value is not None:
            st.keys.append("loss_value")
            st.flags.append(value)
            bf = st.backward_frame
            st.loss_sites.append((bf.file, bf.line) if bf is not None else None)
        if value is not None and root is floats[0] and len(floats) == 1:
            st.keys.append("loss")  # the same reduction of the same tensor: reuse it
            st.flags.append(value)
        else:
            self._add_sums("loss", floats)
        # The loss's own graph (between the model outputs and the loss) cannot be replayed once
        # backward has freed it; keep its few nodes' saved tensors until this step's sync.
        stop = {id(n) for n in st.output_nodes}
        for node in graph_nodes([r.grad_fn for r in floats], stop, limit=32):
            if id(node) in stop or type(node).__name__ == "AccumulateGrad":
                continue
            saved = saved_tensors(node)
            if saved:
                st.loss_nodes.append((node._sequence_nr(), type(node).__name__, saved))

    def on_backward_end(self, roots: tuple[torch.Tensor, ...]) -> None:
        assert self.session is not None
        if not self.session.optimizers:
            params = [p for m in self.session.models for p in m.parameters()]
            self._sync(grads=[p.grad for p in params if p.grad is not None], optimizer=None)

    def on_optimizer_step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        self.amp.stepped(optimizer)
        params = [p for g in optimizer.param_groups for p in g["params"]]
        skip = self._sync(grads=[p.grad for p in params if p.grad is not None], optimizer=optimizer)
        if skip:
            # skip_step: the optimizer skips parameters whose .grad is None, so hiding the grads
            # leaves parameters and state bitwise unchanged; they come back after the step.
            self._stashed[id(optimizer)] = [(p, p.grad) for p in params]
            for p in params:
                p.grad = None

    def on_optimizer_step_post(self, optimizer: torch.optim.Optimizer) -> None:
        stashed = self._stashed.pop(id(optimizer), None)
        if stashed is not None:
            for p, g in stashed:
                p.grad = g
            return
        assert self.session is not None
        params = [p for g in optimizer.param_groups for p in g["params"] if p.numel() and not p.is_sparse]
        n_params = len(params)
        states = optimizer.state
        tensors = params + [v for p in params if p in states for v in states[p].values()
                            if isinstance(v, torch.Tensor) and v.dim() > 0 and v.is_floating_point()
                            and v.numel() and not v.is_sparse]
        if tensors:
            # One foreach call for both kinds (one Python -> C++ transition for all tensors; a
            # Python loop of per-tensor sums measured no faster on CPU), each tensor's own norm
            # read: no global norm, which finite but huge values could overflow. no_grad: the
            # post-hook runs in the caller's grad mode, and norms of parameters would build graph.
            grad_ok = self._grad_norm is None or math.isfinite(self._grad_norm)
            if self.session.rank_fields:  # (issue 15, as in _sync)
                from .._distributed._shards import local_shards

                tensors = local_shards(tensors)
            with torch.no_grad():
                norms = foreach_norm(tensors)
            self._after = (norms, n_params, self.session.step, grad_ok)

    def on_step_end(self, step: int) -> None:
        if self._step.flags:
            self._sync(grads=[], optimizer=None)

    def on_end(self) -> None:
        if self._step.flags or self._after is not None:
            self._sync(grads=[], optimizer=None)
        self.amp.finish()

    # ------------------------------------------------------------------ the one sync
    def _sync(self, grads: list[torch.Tensor], optimizer: torch.optim.Optimizer | None,
              scaled_overflow_ok: bool = False) -> bool:
        """Read every flag of the step at once; localize what tripped. True = skip this update."""
        assert self.session is not None
        st = self._step
        keys, scalars = st.keys, st.flags
        st.keys, st.flags = [], []
        sites, st.loss_sites = st.loss_sites, []
        after = self._after
        self._after = None
        upd_step, grad_ok = 0, False
        if after is not None:
            norms, n_params, upd_step, grad_ok = after
            keys += ["update"] * n_params + ["state"] * (len(norms) - n_params)
            scalars += norms
        if self.session.rank_fields:  # a distributed session: FSDP's DTensors -> local shards
            from .._distributed._shards import local_shards

            grads = local_shards(grads)
        gnorms = _norms(grads)
        keys += ["grad"] * len(gnorms)
        scalars += gnorms
        if not scalars:
            return False
        sess = self.session
        # The other checks' numbers of this step (silent, gradients) are read along: one sync.
        values = _read(scalars, _deferred.riders(sess))
        if self._poisoned is None and all(v - v == 0 for v in values):
            # Every flag finite (x - x is NaN for NaN and ±Inf): nothing can trip. The full path
            # below would come to the same; this skips its bookkeeping on the common step.
            if "loss_value" in keys:
                st.loss_value = values[keys.index("loss_value")]
                self._record_losses(keys, values, sites)
            if gnorms:
                self._grad_norm = values[-1] if len(gnorms) == 1 else math.hypot(*values[-len(gnorms):])
                sess.record_series("grad_norm", self._grad_norm)
            self._release()
            return False
        got = _by_kind(keys, values)
        if "loss_value" in got:
            st.loss_value = got["loss_value"][0]
            self._record_losses(keys, values, sites)
        if "grad" in got:
            got["grad"] = [math.hypot(*got["grad"])]  # one norm over the devices
            self._grad_norm = got["grad"][0]
            sess.record_series("grad_norm", self._grad_norm)
        step = sess.step
        if self._poisoned is not None:
            if any(not math.isfinite(v) for k, vs in got.items() if k not in ("update", "state") for v in vs):
                sess.add(self._poisoned)
            self._release()
            return False
        # Execution order: the previous update, then data → forward → loss → backward.
        for kind in ("update", "state"):
            if kind in got and grad_ok and not all(math.isfinite(v) for v in got[kind]):
                # (with non-finite gradients the bad update is a consequence, reported already)
                found = _localize.localize_update(sess, upd_step, self._grad_norm)
                if found:  # else: finite but huge parameters overflowed the norm; the forward shows it
                    self._report("optimizer", lambda found=found: found)
                    self._release()
                    return False
        trip = _trip(got, scaled_overflow_ok)
        if trip is None:
            self._release()
            return False
        skip = sess.on_anomaly is OnAnomaly.SKIP_STEP and optimizer is not None
        try:
            self._report(trip, lambda: self._localize(trip, step, grads))
        finally:
            self._release()
        if not skip and optimizer is not None and self._first is not None and trip != "data" \
                and "grad" in got and not math.isfinite(got["grad"][0]):
            self._poisoned = self._first
        return skip

    def _record_losses(self, keys: list[str], values: list[float], sites: list[Any]) -> None:
        """One loss series per backward call site (a GAN's D and G losses apart; issue 11): the
        first site is "loss", later ones "loss <file>:<line>"."""
        assert self.session is not None
        losses = [v for k, v in zip(keys, values) if k == "loss_value"]
        done: set[Any] = set()
        for i, v in enumerate(losses):
            site = sites[i] if i < len(sites) else None
            if site in done:
                continue  # one value per site and step (a step that skipped its update: the first)
            done.add(site)
            name = self._loss_series.get(site)
            if name is None:
                name = "loss" if not self._loss_series else f"loss {os.path.basename(site[0])}:{site[1]}" \
                    if site is not None else f"loss #{len(self._loss_series) + 1}"
                self._loss_series[site] = name
            self.session.record_series(name, v)

    def _localize(self, trip: str, step: int, grads: list[torch.Tensor]) -> list[Finding]:
        assert self.session is not None
        sess, st = self.session, self._step
        dist = sess.checker("distributed") if trip != "data" else None
        if dist is not None:
            # FSDP: a sharded model cannot be replayed by one rank (issue 15)
            sharded = dist.sharded_nonfinite(trip, step, st.loss_value)  # type: ignore[attr-defined]
            if sharded is not None:
                return [sharded]
        if trip == "data":
            f = _localize.localize_data(sess, step)
            return [f] if f is not None else []
        if trip == "forward":
            return [_localize.localize_forward(sess, st, step)]
        if trip == "loss":
            return [_localize.localize_loss(sess, st, step)]
        dist = sess.checker("distributed")
        if dist is not None:
            # DDP: this rank's own gradients finite, the reduced ones not -> received (issue 15)
            received = dist.received_nonfinite(step)  # type: ignore[attr-defined]
            if received is not None:
                return [received]
        if not any(nonfinite(g) for g in grads):
            return [_grad_overflow(step, self._grad_norm)]
        return [_localize.localize_backward(sess, st, step)]

    def _report(self, stage: str, localize: Any) -> None:
        assert self.session is not None
        if self._replays >= MAX_REPLAYS and stage in self._by_stage:
            self.session.add(self._by_stage[stage])  # counted once more, not replayed again
            return
        self._replays += 1
        for f in localize():
            self._by_stage[stage] = self.session.add(f)
            if self._first is None and (f.severity is not Severity.INFO
                                        or f.code == "distributed.nonfinite_received"):
                self._first = self._by_stage[stage]

    def _release(self) -> None:
        # Nothing of the step may outlive its sync (memory stays flat over long runs).
        st = self._step
        st.outputs, st.output_nodes, st.loss_calls, st.loss_nodes = [], [], [], []


def _nan_or_posinf(v: float) -> bool:
    return v != v or v == math.inf


def _by_kind(keys: list[str], values: list[float]) -> dict[str, list[float]]:
    """The step's read flags grouped by kind (data, forward, loss, grad, update, ...)."""
    got: dict[str, list[float]] = {}
    for k, v in zip(keys, values):
        if k in got:
            got[k].append(v)
        else:
            got[k] = [v]
    return got


def _trip(got: dict[str, list[float]], scaled_overflow_ok: bool) -> str | None:
    """The first stage, in execution order, whose flags tripped (data → forward → loss →
    backward), or None. Outputs trip on NaN / +Inf (a -Inf is a mask)."""
    if any(_nan_or_posinf(v) for v in got.get("data", [])):
        return "data"
    if any(_nan_or_posinf(v) for v in got.get("forward", [])):
        return "forward"
    if any(not math.isfinite(v) and not (scaled_overflow_ok and v == v) for v in got.get("loss", [])):
        # (a GradScaler step skipped because loss * scale overflowed is expected; NaN is not)
        return "loss"
    if "grad" in got and not math.isfinite(got["grad"][0]):
        return "backward"
    return None


def _grad_overflow(step: int, norm: float | None) -> Finding:
    return Finding(Category.NUMERICAL, "numerical.grad_norm_overflow", msg("nonfinite.grad_overflow", step=step),
                   severity=Severity.WARNING, stage=Stage.BACKWARD, step=step,
                   cause=msg("nonfinite.cause.grad_overflow"), next_check=msg("nonfinite.next.grad_overflow"),
                   evidence={"global grad norm": norm})


def _read(scalars: list[torch.Tensor], riders: list[_deferred.DeferredFlags] = ()) -> list[float]:  # type: ignore[assignment]
    """The single host transfer of a step: the sentinel's flags, and the numbers other checks
    queued in `riders` (filled into them; the sentinel's own values are returned)."""
    extra = [t for r in riders for t in r.pending()]
    if not extra:
        try:
            # The common case, all flags on one device: one stack (it promotes mixed float dtypes
            # exactly: float16/32 -> float32/64) and no per-flag conversion. Every flag is 0-dim.
            return torch.stack(scalars).tolist()
        except RuntimeError:  # flags on several devices
            return _deferred.read_scalars(scalars)
    values = _deferred.read_scalars([*scalars, *extra])
    at = len(scalars)
    for r in riders:
        n = sum(t.numel() for t in r.pending())
        r.fill(values[at:at + n])
        at += n
    return values[:len(scalars)]
