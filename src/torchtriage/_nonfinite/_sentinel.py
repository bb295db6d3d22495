"""`NonFiniteSentinel`: the always-on check for the first non-finite value of a step.

Hot path (every step, no per-tensor sync), the steady state (`_flags` says what is kept and why):
    data       each floating batch tensor, kept by reference   (NaN or +Inf trips; -Inf masks do not)
    forward    each floating root output, kept by reference    (same rule)
    loss       the backward root itself, 0-dim                  (any non-finite value trips)
    backward   at the read, ONE `torch._foreach_norm` call over the kept batch / outputs and every
               gradient; the host combines the gradients' norms (in float64, with float32's
               overflow kept) into the "grad_norm" series. A kept tensor's norm that reads
               non-finite is decided by its sum (a second read, on that anomaly path only).
    optimizer  nothing on most steps: a parameter the update made non-finite shows in the next
               step's forward or gradient flags, and that trip first looks at the last update
               (`_localize.localize_update`, only on the anomaly path). Every SAMPLE_EVERY-th
               update and the last one of the session get the full check: the L2 norm of each
               parameter and optimizer state tensor, one `torch._foreach_norm` call (read at the
               next sync) — optimizer state that overflows while the parameters stay finite is
               seen there only.
The warm-up steps, `late_read`, a loop that writes to its batch or outputs in place, and large
tensors (summed while still in cache) take a float32 `sum` per tensor at the forward instead.
Every flag is a 0-dim tensor kept as is (no per-flag conversion or pre-reduction: inside a small
step each distinct op runs cold and costs as much as the reduction itself). All flags of a step
are stacked once and read with ONE host transfer, at `optimizer.step()`'s pre-hook
(before the update: a non-finite update can still be skipped), or at backward's end without an
optimizer. With `late_read=True` (and no `skip_step`) that transfer is started there and read at
the next step (`_late`): an accelerator keeps its queue. Intermediate modules are not checked:
NaN/Inf propagate to one of these boundaries, and the replay (`_localize`) finds where they were born.
"""

from __future__ import annotations

import math
import os
import warnings
import weakref
from typing import Any

import torch
import torch.nn as nn

from .. import _deferred
from .._catalogue import msg
from .._checker import Checker, LossCall
from .._config import OnAnomaly
from .._errors import AnomalyError, TriageWarning
from .._findings import Category, Finding, Severity, Stage
from .._frames import user_frame_from_stack
from .._modestack import own_modes_off
from ._amp import ScalerWatch
from ._flags import WARMUP_STEPS, Read, StepFlags, nan_or_posinf, sum_flag
from ._late import finding as late_finding
from ._late import start as start_late_read
from ._localize import localize_backward, localize_data, localize_forward, localize_loss, localize_update
from ._replay import float_leaves, graph_nodes, loss_saved
from ._trace import nonfinite

MAX_REPLAYS = 3  # a run that stays NaN would otherwise replay every step
SAMPLE_EVERY = 64  # updates whose parameters and optimizer state are all checked (and the last)
_F32_MAX = 3.4028234663852886e38  # a float32 norm above this reads +Inf


_LOW = (torch.float16, torch.bfloat16)


def foreach_norm(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor's L2 norm, one foreach call per precision. float16 / bfloat16 norms are
    returned in float32: a finite half tensor's norm can exceed 65504 (a pure-half model's
    large parameter, its gradient), and an Inf norm there would read as a non-finite value."""
    for t in tensors:
        if t.dtype in _LOW:
            break
    else:  # (the common case: no half tensor)
        return list(torch._foreach_norm(tensors))
    low = [t.dtype in _LOW for t in tensors]
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


_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def _global_norm(values: list[float], r: Read) -> float:
    """The global L2 norm of per-tensor norms, as the float32 norm on the device read it: one
    above float32's range is +Inf (the overflow the grad_overflow finding reports), unless a
    gradient is float64 (`r.wide`)."""
    n = values[0] if len(values) == 1 else math.hypot(*values)
    return math.inf if n > _F32_MAX and not r.wide else n


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
        self._step = StepFlags()
        # Per-tensor norms of the last update's parameters and optimizer state (0-dim tensors,
        # read at the next sync), how many of them are parameters, its step, grads finite then.
        self._after: tuple[list[torch.Tensor], int, int, bool] | None = None
        # The last update not checked in full: (its step, grads finite then, grad norm then,
        # each parameter's version right after it). A trip at the next read looks at it first.
        self._updated: list[tuple[int, bool, float | None, tuple[list[torch.Tensor], list[int]]]] = []
        self._params: weakref.WeakKeyDictionary[Any, tuple[Any, list[torch.Tensor]]] = weakref.WeakKeyDictionary()
        self._stepped: weakref.ref[Any] | None = None  # the last optimizer that stepped
        self._stepping: tuple[Any, list[torch.Tensor]] | None = None  # the update under way, its parameters
        self._sparse = False  # a gradient was sparse once: filter them out before the norms
        self._replays = 0
        self._by_stage: dict[str, Finding] = {}
        self._stashed: dict[int, list[tuple[torch.Tensor, torch.Tensor | None]]] = {}
        self._grad_norm: float | None = None
        # Set once a non-finite value was localized and then applied by the optimizer: every later
        # trip is its consequence (NaN parameters), counted on the first finding, not replayed.
        self._poisoned: Finding | None = None
        self._first: Finding | None = None
        self._loss_series: dict[Any, str] = {}
        self.amp = ScalerWatch(read_skipped=lambda: self._sync(grads=[], optimizer=None, scaled_overflow_ok=True),
                               autocast=lambda: self._step.autocast)
        # late_read: this step's flags are read at the next step (`_late`), not before the update
        self.late_read = False
        self._pending: Read | None = None
        self._pinned: dict[Any, torch.Tensor] = {}
        # Batch and outputs summed at the forward on every step (`_flags`): this loop writes to
        # them in place, or a norm of them reads non-finite without a trip, or late_read.
        self._eager = False

    # ------------------------------------------------------------------ lifecycle
    def on_start(self, session: Any) -> None:
        self.amp.install(session)
        self.late_read = bool(session.options.get("late_read", False))  # (validated by the session)
        self._eager = self.late_read  # (a late read judges after the kept tensors may have changed)

    def on_step_begin(self, step: int) -> None:
        self._step = StepFlags(eager=self._eager or step < WARMUP_STEPS)

    def on_root_forward(self, model: nn.Module, label: str, args: tuple[Any, ...],
                        kwargs: dict[str, Any], output: Any) -> None:
        st = self._step
        if not st.seen_forward:
            st.seen_forward = True
            st.take("data", float_leaves((args, kwargs)))
            if _any_autocast():
                st.autocast = [(d, torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")
                               if torch.is_autocast_enabled(d)]
        outs = float_leaves(output)
        st.take("forward", outs)
        st.outputs += outs

    def on_loss(self, call: LossCall) -> None:
        self._step.loss_calls.append(call)

    def on_backward(self, roots: tuple[torch.Tensor, ...], grads: Any) -> None:
        st = self._step
        floats = [r for r in roots if isinstance(r, torch.Tensor) and (r.is_floating_point() or r.is_complex())]
        if not floats:
            return
        root = self.amp.unscaled(floats[0])
        grad = grads[0] if isinstance(grads, (tuple, list)) and grads else grads
        signed = isinstance(grad, torch.Tensor) and grad.numel() == 1 and root.numel() == 1 and root.is_floating_point()
        if signed:
            # `D_real.backward(mone)`: the objective minimized is the root times its gradient (a
            # WGAN critic's output is maximized: its growth is the goal, not a divergence); the
            # root's own finiteness flag is kept apart (a sign must not turn +Inf into -Inf)
            with torch.no_grad():
                value: torch.Tensor | None = sum_flag(root.detach() * grad.detach().to(root.dtype).reshape(root.shape))
        elif not st.eager and not root.dim() and root.is_floating_point():
            value = root  # itself (stacked under no_grad at the read), watched
            st.watch(root)
        else:
            value = sum_flag(root) if root.numel() == 1 else None
        st.backward_frame = bf = user_frame_from_stack(3)
        if value is not None:
            st.keys.append("loss_value")
            st.flags.append(value)
            st.n_losses += 1
            st.loss_sites.append((bf.file, bf.line) if bf is not None else None)
        if value is not None and root is floats[0] and len(floats) == 1 and not signed:
            st.keys.append("loss")  # the same value of the same tensor: reuse it
            st.flags.append(value)
        else:
            for t in floats:
                if t.numel():
                    st.keys.append("loss")
                    st.flags.append(sum_flag(t))
        # The loss's own graph (between the model outputs and the loss) cannot be replayed once
        # backward has freed it; keep the saved tensors its re-evaluation can use until the read.
        # Not when the root is a recorded functional loss's own output: its replay (with the
        # recorded arguments) traces those very ops (`_localize.localize_loss`).
        if len(floats) == 1 and st.loss_calls and st.loss_calls[-1].output is floats[0]:
            return
        stop = {id(t.grad_fn) for t in st.outputs}
        for node in graph_nodes([r.grad_fn for r in floats], stop, limit=32):
            if id(node) in stop:
                continue
            saved = loss_saved(node)
            if saved:
                st.loss_nodes.append((node._sequence_nr(), type(node).__name__, saved))

    def on_backward_end(self, roots: tuple[torch.Tensor, ...]) -> None:
        assert self.session is not None
        if self._stepped is not None and self._stepped() is not None:
            return  # (one of the session's optimizers has stepped and is alive: it reads the flags)
        if not self.session.optimizers:
            params = [p for m in self.session.models for p in m.parameters()]
            self._sync(grads=[p.grad for p in params if p.grad is not None], optimizer=None)

    def params_of(self, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
        """The optimizer's parameters, cached; rebuilt when a group is added or its list changes."""
        groups = optimizer.param_groups
        if len(groups) == 1:
            return groups[0]["params"]  # (the group's own list: read, never changed)
        key = tuple((id(g["params"]), len(g["params"])) for g in groups)
        hit = self._params.get(optimizer)
        if hit is None or hit[0] != key:
            hit = self._params[optimizer] = (key, [p for g in groups for p in g["params"]])
        return hit[1]

    def on_optimizer_step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        self.amp.stepped(optimizer)
        params = self.params_of(optimizer)
        self._stepping = (optimizer, params)
        if self._stepped is None or self._stepped() is not optimizer:
            self._stepped = weakref.ref(optimizer)
        skip = self._sync(grads=[p.grad for p in params if p.grad is not None], optimizer=optimizer)
        if skip:
            # skip_step: the optimizer skips parameters whose .grad is None, so hiding the grads
            # leaves parameters and state bitwise unchanged; they come back after the step.
            self._stashed[id(optimizer)] = [(p, p.grad) for p in params]
            for p in params:
                p.grad = None

    def on_optimizer_step_post(self, optimizer: torch.optim.Optimizer) -> None:
        if self._stashed:
            stashed = self._stashed.pop(id(optimizer), None)
            if stashed is not None:
                for p, g in stashed:
                    p.grad = g
                return
        assert self.session is not None
        step = self.session.step
        norm = self._grad_norm
        grad_ok = norm is None or norm - norm == 0
        if step % SAMPLE_EVERY:
            # Most updates: nothing on the device. Each parameter's version after the update
            # tells, at a later trip, whether anything wrote to it since (a checkpoint load).
            stepping, self._stepping = self._stepping, None
            params = stepping[1] if stepping is not None and stepping[0] is optimizer else self.params_of(optimizer)
            self._updated.append((step, grad_ok, norm, (params, [p._version for p in params])))
        else:
            self._check_update([optimizer], step, grad_ok)

    def _check_update(self, optimizers: list[torch.optim.Optimizer], step: int, grad_ok: bool) -> None:
        """The full check of an update: every parameter's and state tensor's norm, read at the
        next sync (a sampled update, the session's last one)."""
        assert self.session is not None
        params = [p for o in optimizers for p in self.params_of(o) if p.numel() and not p.is_sparse]
        n_params = len(params)
        states = {p: s for o in optimizers for p, s in o.state.items()}
        tensors = params + [v for p in params if p in states for v in states[p].values()
                            if isinstance(v, torch.Tensor) and v.dim() > 0 and v.is_floating_point()
                            and v.numel() and not v.is_sparse]
        if tensors:
            # One foreach call for both kinds (one Python -> C++ transition for all tensors; a
            # Python loop of per-tensor sums measured no faster on CPU), each tensor's own norm
            # read: no global norm, which finite but huge values could overflow. no_grad: the
            # post-hook runs in the caller's grad mode, and norms of parameters would build graph.
            if self.session.rank_fields:  # (issue 15, as in _sync)
                from .._distributed._shards import local_shards

                tensors = local_shards(tensors)
            with torch.no_grad():
                norms = foreach_norm(tensors)
            self._after = (norms, n_params, step, grad_ok)

    def on_step_end(self, step: int) -> None:
        if self._step.flags or self._step.kept:
            self._sync(grads=[], optimizer=None)

    def on_raise(self, exc: BaseException) -> None:
        """The step raised before its read: read its flags now, so that the error's explanation
        sees a NaN that came before it (and counts the error on it). The user's exception is
        what propagates: the policy neither raises nor warns in its place here."""
        if not self._step.flags and not self._step.kept:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TriageWarning)
            try:
                self._sync(grads=[], optimizer=None)
            except AnomalyError:
                pass  # (recorded; the user's exception is the one raised)

    def on_end(self) -> None:
        assert self.session is not None
        if self._updated and self._after is None:
            # The session's last update gets the full check (it has no next step to show it).
            step, grad_ok, _, _ = self._updated[-1]
            self._updated = []
            self._check_update(list(self.session.optimizers), step, grad_ok)
        if self._step.flags or self._step.kept or self._after is not None:
            self._sync(grads=[], optimizer=None)
        elif self._pending is not None:
            self._read_late()
        self.amp.finish()
        self._stepped = self._stepping = None

    # ------------------------------------------------------------------ the one sync
    def _sync(self, grads: list[torch.Tensor], optimizer: torch.optim.Optimizer | None,
              scaled_overflow_ok: bool = False) -> bool:
        """Read every flag of the step at once; localize what tripped. True = skip this update."""
        sess = self.session
        assert sess is not None
        if self._pending is not None:
            self._read_late()  # the previous step's flags come first
        if sess.rank_fields:  # a distributed session: FSDP's DTensors -> local shards
            from .._distributed._shards import local_shards

            grads = local_shards(grads)
        # (the first steps' tracing modes need not see our flags; no graph of the outputs' norms
        # nor of the loss, which is stacked as it is)
        grad_mode = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        try:
            with own_modes_off():
                r = self._gather(grads)
                if not r.scalars:
                    return False
                # The other checks' numbers of this step (silent, gradients) are read along: one sync.
                riders = _deferred.riders(sess)
                if (self.late_read and optimizer is not None and not riders and self._poisoned is None
                        and sess.on_anomaly is not OnAnomaly.SKIP_STEP):
                    pending = start_late_read(r.scalars, self._pinned)
                    if pending is not None:
                        # (nothing of this step will be replayed: its state goes now)
                        r.pending, r.scalars = pending, []
                        self._pending = r
                        self._release()
                        return False
                values = _read(r.scalars, riders)
        finally:
            torch._C._set_grad_enabled(grad_mode)
        return self._judge(r, values, grads, optimizer, scaled_overflow_ok)

    def _gather(self, grads: list[torch.Tensor]) -> Read:
        """This step's flags (and the last update's, when it was checked in full), in order: the
        flags computed at their events, the update's norms, then one `foreach_norm` call over the
        kept batch / output tensors and the gradients."""
        assert self.session is not None
        st = self._step
        r = Read(st.keys, st.flags, st.loss_sites, self.session.step, self._after, self._updated, st.n_losses)
        if st.watched and [t._version for t in st.watched] != st.versions:
            # Written in place since the forward (or backward): this step's kept tensors are
            # read as they are now; every later step sums them at the forward.
            self._eager = True
        kept, kinds = st.kept, st.kept_kinds
        st.keys, st.flags, st.loss_sites, st.n_losses = [], [], [], 0
        st.kept, st.kept_kinds, st.watched, st.versions = [], [], [], []
        self._after, self._updated = None, []
        if r.after is not None:
            norms, n_params, _, _ = r.after
            r.keys += ["update"] * n_params + ["state"] * (len(norms) - n_params)
            r.scalars += norms
        if self._sparse:
            grads = [g for g in grads if not g.is_sparse]
        tensors = kept + grads if kept else grads
        if not tensors:
            return r
        try:
            norms = foreach_norm(tensors)  # (an empty tensor's norm is 0)
        except (NotImplementedError, RuntimeError):
            if self._sparse or not any(g.is_sparse for g in grads):
                raise
            self._sparse = True  # (an embedding's sparse gradient, seen by the update check)
            grads = [g for g in grads if not g.is_sparse]
            tensors = kept + grads
            norms = foreach_norm(tensors) if tensors else []
        if kept:
            r.kept, r.kept_at = kept, len(r.scalars)
            r.keys += kinds
        r.keys += ["grad"] * len(grads)
        r.scalars += norms
        r.n_grads = len(grads)
        r.grad_norms = norms[len(kept):] if kept else norms
        return r

    def _read_late(self) -> None:
        """Judge the previous step's flags, read one step late (`late_read`)."""
        r, self._pending = self._pending, None
        assert r is not None and r.pending is not None
        values = r.pending.values()
        self._judge(r, values, [], None, False, late=True)
        if self._grad_norm is not None and (r.after is not None or r.updated):
            # The update that followed that step was recorded before its gradients were read.
            ok = math.isfinite(self._grad_norm)
            if self._after is not None and self._after[2] == r.step:
                self._after = (*self._after[:3], ok)
            self._updated = [(u[0], ok if u[0] == r.step else u[1], self._grad_norm if u[0] == r.step else u[2], u[3])
                             for u in self._updated]

    def _judge(self, r: Read, values: list[float], grads: list[torch.Tensor],
               optimizer: torch.optim.Optimizer | None, scaled_overflow_ok: bool, late: bool = False) -> bool:
        """What the flags of step `r.step` say; localize what tripped. True = skip this update."""
        assert self.session is not None
        sess, st, keys = self.session, self._step, r.keys
        add, step = sess.health.add, r.step  # (the session's series: `record_series` at r.step)
        total = sum(values)
        if total - total == 0 and self._poisoned is None:
            # Every flag finite (x - x is NaN for NaN and ±Inf; a sum that overflows takes the
            # full path, which comes to the same): nothing can trip. This skips the full path's
            # bookkeeping on the common step.
            if r.n_losses:
                v = values[keys.index("loss_value")]
                if not late:
                    st.loss_value = v
                name = self._loss_series.get(r.sites[0]) if r.n_losses == 1 and len(r.sites) == 1 else None
                if name is not None:  # the common step: one backward, a known call site
                    add(name, step, v)
                else:
                    self._record_losses(r, values, lambda name, v: add(name, step, v))
            n = r.n_grads
            if n:
                norm = values[-1] if n == 1 else math.hypot(*values[-n:])
                self._grad_norm = math.inf if norm > _F32_MAX and not r.wide else norm  # (`_global_norm`)
                add("grad_norm", step, self._grad_norm)
            if not late:
                st.outputs, st.loss_calls, st.loss_nodes = [], [], []  # (`_release`)
            return False
        record = lambda name, v: add(name, step, v)  # noqa: E731
        if r.kept and not r.kept_finite(values):
            values = self._exact(r, values)
        got = _by_kind(keys, values)
        if not self._eager and any(v == -math.inf for k in ("data", "forward") for v in got.get(k, ())):
            self._eager = True  # -Inf in the batch or outputs (a mask): their norms would read +Inf
        if "loss_value" in got:
            if not late:
                st.loss_value = got["loss_value"][0]
            self._record_losses(r, values, record)
        if "grad" in got:
            got["grad"] = [_global_norm(got["grad"], r)]  # one norm over the tensors
            self._grad_norm = got["grad"][0]
            record("grad_norm", self._grad_norm)
        release = self._release if not late else (lambda: None)
        if self._poisoned is not None:
            if any(not math.isfinite(v) for k, vs in got.items() if k not in ("update", "state") for v in vs):
                sess.add(self._poisoned)
            release()
            return False
        # Execution order: the previous update, then data → forward → loss → backward.
        if r.after is not None:
            _, _, upd_step, grad_ok = r.after
            for kind in ("update", "state"):
                if kind in got and grad_ok and not all(math.isfinite(v) for v in got[kind]):
                    # (with non-finite gradients the bad update is a consequence, reported already)
                    found = localize_update(sess, upd_step, self._grad_norm)
                    if found:  # else: finite but huge parameters overflowed the norm; the forward shows it
                        self._report("optimizer", lambda found=found: found)
                        release()
                        return False
        trip = _trip(got, scaled_overflow_ok)
        if trip is None:
            release()
            return False
        if r.updated and r.updated[-1][1]:
            # A trip after an update that was not checked in full (with finite gradients): a
            # parameter or state that update made non-finite is said so, as the full check
            # would have; a parameter written since (its version moved) is left to the replay.
            # Only on the anomaly path: a read per tensor.
            upd_step, _, upd_norm, (params, versions) = r.updated[-1]
            found = localize_update(sess, upd_step, upd_norm,
                                              {id(p): v for p, v in zip(params, versions)})
            if found:
                self._report("optimizer", lambda: found)
                release()
                return False
        grads_bad = "grad" in got and not math.isfinite(got["grad"][0])
        if late:
            # Seen one step late: the update ran and the step cannot be replayed. Say what
            # tripped where, and read every later step at once (localized as usual).
            ev = {"loss": st_loss(got), "global grad norm": self._grad_norm}
            self._report(trip, lambda: [late_finding(trip, step, ev)])
            self.late_read = False
            if self._first is not None and grads_bad:
                self._poisoned = self._first
            return False
        skip = sess.on_anomaly is OnAnomaly.SKIP_STEP and optimizer is not None
        try:
            self._report(trip, lambda: self._localize(trip, step, grads))
        finally:
            self._release()
        if not skip and optimizer is not None and self._first is not None and grads_bad:
            self._poisoned = self._first
        return skip

    def _exact(self, r: Read, values: list[float]) -> list[float]:
        """A kept batch / output tensor's norm read non-finite: their sums decide (NaN or +Inf
        trips; a -Inf mask or values whose squares overflow do not). A second read, on this
        anomaly path only; a run where it finds no trip sums them at the forward from now on."""
        with own_modes_off(), torch.no_grad():
            sums = _deferred.read_scalars([sum_flag(t) for t in r.kept])
        if not any(nan_or_posinf(v) for v in sums):
            self._eager = True
        at = r.kept_at
        return values[:at] + sums + values[at + len(r.kept):]

    def _record_losses(self, r: Read, values: list[float], record: Any) -> None:
        """One loss series per backward call site (a GAN's D and G losses apart; issue 11): the
        first site is "loss", later ones "loss <file>:<line>"."""
        assert self.session is not None
        keys, sites = r.keys, r.sites
        if r.n_losses == 1 and len(sites) == 1:  # the common step: one backward
            name = self._loss_series.get(sites[0])
            if name is not None:
                record(name, values[keys.index("loss_value")])
                return
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
            record(name, v)

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
            f = localize_data(sess, step)
            if f is not None and f.file is None:
                # Not traced to an op this time (the step was not taped): the same input of an
                # earlier batch was traced already, through the same pipeline; counted there.
                earlier = next((g for g in sess.findings if g.code == f.code and g.file is not None
                                and g.evidence.get("where") == f.evidence.get("where")), None)
                if earlier is not None:
                    return [earlier]
            return [f] if f is not None else []
        if trip == "forward":
            return [localize_forward(sess, st, step)]
        if trip == "loss":
            return [localize_loss(sess, st, step)]
        dist = sess.checker("distributed")
        if dist is not None:
            # DDP: this rank's own gradients finite, the reduced ones not -> received (issue 15)
            received = dist.received_nonfinite(step)  # type: ignore[attr-defined]
            if received is not None:
                return [received]
        if not any(nonfinite(g) for g in grads):
            return [_grad_overflow(step, self._grad_norm)]
        return [localize_backward(sess, st, step)]

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
        st.outputs, st.loss_calls, st.loss_nodes = [], [], []


def st_loss(got: dict[str, list[float]]) -> float | None:
    vals = got.get("loss_value")
    return vals[0] if vals else None


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
    if any(nan_or_posinf(v) for v in got.get("data", [])):
        return "data"
    if any(nan_or_posinf(v) for v in got.get("forward", [])):
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
