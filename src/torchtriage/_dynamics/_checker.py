"""`DynamicsChecker` (check "dynamics"): per-step health and the detectors fed by it.

Per step, with no device read of its own: the lr of every param group (Python floats), and the
loss and global gradient norm the non-finite sentinel read in its one read of the step
(`session.health`, series "loss", "grad_norm"). At sampled steps (`_layers`): per-layer
gradient norms and update-to-parameter ratios, riding the next step's read (`resolve_read` at a
step's end runs what was read and keeps the rest queued, so `dynamics_every=1` stays bounded). Warm-up steps and
the first evaluation forwards: the metric region (`_evalcode`) and the loss's prior and shift
numbers (riding the step's read). Without the sentinel, the loss is queued here and read at the
step's end (one read per step). Clipping and accumulation order (`_order`) are watched on the
steps of `_cadence.sampled` (each backward's call site is a stack walk).
"""

from __future__ import annotations

import collections
import functools
import math
import sys
import weakref
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from .. import _cadence, _deferred
from .._checker import Checker, LossCall
from .._findings import Category, Finding, Severity, Stage
from .._frames import optimizer_frame, user_frame_from_stack
from .._nonfinite._sentinel import foreach_norm
from .._silent._common import first_tensor, is_index_tensor
from .._silent._node_site import node_site
from .._zerograd import on_zero_grad
from ._barefreeze import BareFreeze
from ._bnmomentum import BnMomentum, fast_batchnorms
from ._causal import probe, shift_share, token_ids
from ._clipcfg import ClipConfig
from ._closure import ClosureEvaluations
from ._common import finding, num
from ._decay import decay_inverted
from ._evalcode import MetricRegion, dim_finding, node_checks
from ._gradwrites import GradWrites, patch_zero_grad
from ._groups import GroupSettings, user_frames
from ._harm import HarmGate
from ._layers import Sample, Vanishing, _local, grad_params, layer_kind, layer_names, per_layer, update_ratio
from ._mixwatch import MixWatch
from ._mseprior import POOL_STEPS, TargetMoments
from ._normdecay import MissedScales, missed_norm_scales
from ._order import StepOrder
from ._periodic import PeriodicBranches
from ._phases import Phases
from ._rebuilt import Rebuilds
from ._sawtooth import grad_scale_restarts
from ._schedules import ScheduleWatch, lr_value
from ._trends import PRIOR_MIN_STEPS, TINY_UPDATE, Growth, Spikes, at_prior, label_entropy, loss_not_lower

if TYPE_CHECKING:
    from .._session import Session

MAX_LR_SERIES = 8
MAX_NORMS_PER_READ = 8  # gradient norms consumed per read (a late read brings the previous step's too)
_RECURRENT = ("RNN", "LSTM", "GRU")


class DynamicsChecker(Checker):
    """Runs that neither crash nor learn: divergence, stagnation, the loss at the prior, LR
    schedule misuse, exploding / vanishing gradients, clipping and accumulation order, metric
    code that broadcasts, softmax over the wrong dimension, attention that sees the future."""

    name = "dynamics"
    session: Session  # attached before on_start: every event below runs with it

    def on_start(self, session: Any) -> None:
        opts = session.options
        self.every = max(1, int(opts.get("dynamics_every", 25)))
        self.eval_passes = int(opts.get("dynamics_eval_passes", 3))
        self.warmup = int(opts.get("silent_warmup", 3))
        self.flags = _deferred.DeferredFlags()
        _deferred.ride(session, self.flags)
        self.sentinel = session.checker("nonfinite") is not None
        self.sched = ScheduleWatch(session)
        self.sched.install()
        self.order = StepOrder(session)
        self.order.install()
        self.order.defer = self.flags.add
        self.order.config = ClipConfig(self.flags.add)
        on_zero_grad(session, "dynamics.partial_clips", lambda obj, kind, caller: self.order.partial.settle())
        self.writes = GradWrites(session, clipped=self._clipped_since_backward)
        self.closures = ClosureEvaluations(session)
        self.rebuilds = Rebuilds(session)
        # param groups whose own settings never take effect (`_groups`)
        self.groups = GroupSettings(session, lambda: self.sched.unstepped.made)
        self.periodic = PeriodicBranches()  # a periodic lr change whose test never holds (`_periodic`)
        self.mix = MixWatch(session, self.flags.add)  # samples of a batch that mix in the forward (`_mixwatch`)
        patch_zero_grad(session, self.writes, self._add_write)
        self.loss_growth, self.grad_growth = Growth(), Growth()
        self.phases = Phases()
        self.harm = HarmGate(self.phases.end_of, self._later_losses)
        self.vanish = Vanishing()
        # the gradient norm's trends, one per place in the step (`_norm_trends`)
        self.norm_trends: dict[int, tuple[Spikes, Growth]] = {}
        self.norm_at = (-1, -1)  # (step, place) of the last gradient norm consumed
        self.loss_head: list[float] = []
        self.loss_recent: collections.deque[float] = collections.deque(maxlen=200)
        self.seen = {"loss": 0, "grad_norm": 0}
        self.samples: dict[int, Sample] = {}
        self.ratios: list[tuple[int, float]] = []
        self.prior: tuple[str, str, float, str] | None = None  # (loss, variant, value, what)
        self.targets = TargetMoments()  # the MSE targets' moments, pooled over the first steps (`_mseprior`)
        self.class_counts: list[float] | None = None
        self.region: MetricRegion | None = None
        self.ignore_seen: set[int] = set()  # ignore_index of the run's cross_entropy / nll_loss calls
        self.eval_regions = 0
        self.reported: set[Any] = set()
        self.probed: weakref.WeakSet[nn.Module] = weakref.WeakSet()
        self.probe_pending: tuple[Any, ...] | None = None
        # The root calls the causal probe can probe: the calls open now (a loss computed inside
        # forward, minGPT's `logits, loss = model(idx, targets)`) and the last one that returned
        # (a loss computed after it); targets seen inside a call wait for the call's end.
        self.open_calls: list[nn.Module] = []
        self.last_call: tuple[Any, ...] | None = None
        self.inner_targets: dict[int, tuple[torch.Tensor, int]] = {}
        self.lr_names: dict[tuple[int, int], str] = {}
        self.opt_index: dict[int, int] = {}
        self.lr_series: dict[int, list[str | None]] = {}  # id(optimizer) -> its groups' series names
        self.layer_cache: tuple[list[weakref.ref[torch.Tensor]], list[str]] = ([], [])
        self.stepped = False
        self.decay_checked: set[int] = set()  # id(optimizer): weight decay by rank checked
        self.bare = BareFreeze(session)  # a name-based module freeze that misses a bare parameter (`_barefreeze`)
        self.first_steps: set[int] = set()  # the steps at which an optimizer took its first step
        self.norm_decay: dict[int, MissedScales] = {}  # id(optimizer): norm scales decayed (`_normdecay`)
        self.bn_fast: BnMomentum | None = None  # BatchNorms with momentum >= 0.5 (`_bnmomentum`)
        self.bn_checked = False

    # ------------------------------------------------------------------ helpers
    @property
    def _step(self) -> int:
        return self.session.step

    def _add(self, f: Finding | None) -> None:
        if f is None:
            return
        if self.harm.holds(f) and self.harm.revised(f):  # added now, judged at the end
            self.harm.hold(self.session.add(f))
        elif self.harm.holds(f):  # judged at the end, by what the loss did after it
            self.harm.hold(f)
        else:
            self.session.add(f)

    def _clipped_since_backward(self) -> bool:
        """A `clip_grad_norm_` ran after this step's last backward (or before any): the clip-order
        watch judges it, with the clip's own line."""
        clip = self.order.clip
        return clip is not None and clip[0] == len(self.order.backwards)

    def _add_write(self, f: Finding | None) -> None:
        if f is not None and "clip_after_step" not in self.order.reported:  # (the same fault, named)
            self._add(f)

    def _leave_region(self) -> None:
        region = self.region
        if region is None:
            return
        if region.active or region.metric_suspects or region.dims or region.compares:
            region.active = False  # (its replay must not be watched by itself)
            found = region.findings(self._step, self.reported, self._defer_findings)
            region.metric_suspects, region.dims = [], []
            for f in found:
                self._add(f)
        if region.leave():
            self.region = None

    # ------------------------------------------------------------------ events
    def on_root_forward_pre(self, model: nn.Module, label: str) -> None:
        if self._step < self.warmup:
            self.open_calls.append(model)

    def on_root_forward(self, model: nn.Module, label: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                        output: Any) -> None:
        self.order.forward_since_backward = True
        if self.open_calls and self.open_calls[-1] is model:
            self.open_calls.pop()
        warm = self.session.step < self.warmup
        if warm:
            self.mix.called(model, args, kwargs, lambda: user_frame_from_stack(4))
        if not warm and self.region is None and (self.eval_regions >= self.eval_passes or (
                torch.is_grad_enabled() and not torch.is_inference_mode_enabled())):
            return  # the common case after the first steps: nothing to watch here
        if warm and model not in self.probed:
            call = (model, args, dict(kwargs), user_frame_from_stack(3))
            inner = self.inner_targets.pop(id(model), None)
            if inner is not None:
                self._queue_shift(call, *inner)
            self.last_call = call
        self._leave_region()
        out = first_tensor(output)
        batch = out.shape[0] if out is not None and out.dim() >= 1 else None
        grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        if grad and self._step < self.warmup and out is not None and ("node", id(model)) not in self.reported:
            found = node_checks(out, batch)
            if found is not None:
                self.reported.add(("node", id(model)))
                call = (model, args, kwargs, output)
                self._add(self._node_finding(found, call, out, user_frame_from_stack(3)))
        evaluation = not grad
        if self.region is None and ((evaluation and self.eval_regions < self.eval_passes)
                                    or (grad and self._step < self.warmup)):
            self.eval_regions += evaluation
            self.region = MetricRegion(self.session, batch, evaluation, output)
            self.region.ignore = self.ignore_seen
            self.region.enter()

    def _node_finding(self, found: dict[str, Any], call: tuple[Any, ...], out: torch.Tensor,
                      call_frame: Any) -> Finding:
        """The softmax at the model's output: its module and line, from one replay of the call
        (the user's line in the model's code; the call's line when there is none)."""
        autocast = [(d, torch.get_autocast_dtype(d)) for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)]
        model, args, kwargs, output = call
        site = node_site(self.session, model, args, kwargs, output, out.grad_fn, autocast)
        frame = site.frame if site is not None and site.frame is not None else call_frame
        return dim_finding(found, frame, self._step, module=site.module if site is not None else "")

    def on_loss(self, call: LossCall) -> None:
        if call.name in ("cross_entropy", "nll_loss") and len(self.ignore_seen) < 4:
            ignore = call.kwargs.get("ignore_index", -100)
            if isinstance(ignore, int):
                self.ignore_seen.add(ignore)
        if (call.name == "mse_loss" and self._step < POOL_STEPS and call.option("reduction", "mean") == "mean"
                and isinstance(call.input, torch.Tensor) and isinstance(call.target, torch.Tensor)):
            self.targets.count(self._step, call.output)
            self.targets.add(call.input, call.target, self.flags.add,
                             lambda v: self._set_prior("mse_loss", "mse", v, "target variance"))
        if self._step >= self.warmup:
            return
        self.mix.loss(call, self.open_calls[-1] if self.open_calls else None)
        inp, tgt = call.input, call.target
        if not isinstance(inp, torch.Tensor) or not isinstance(tgt, torch.Tensor):
            return
        if (call.name == "cross_entropy" and inp.dim() >= 2 and inp.shape[1] == 1
                and ("ce1", call.frame) not in self.reported):
            # cross_entropy's own log_softmax over one class: the loss is exactly 0 whatever the model does
            self.reported.add(("ce1", call.frame))
            self._add(dim_finding(dict(name="silent.softmax_single_unit", op="cross_entropy", dim=1,
                                       shape=list(inp.shape),
                                       constant="0"), call.frame, self._step))
        with torch.no_grad():
            if call.name == "cross_entropy" and is_index_tensor(tgt) and inp.dim() >= 2:
                self._queue_classes(inp, tgt, call)
                self._shift_target(tgt, call.option("ignore_index", -100))

    def _queue_classes(self, inp: torch.Tensor, tgt: torch.Tensor, call: LossCall) -> None:
        if call.option("weight") is not None or call.option("label_smoothing", 0.0) \
                or call.option("reduction", "mean") != "mean":
            return
        c = inp.shape[1]
        ignore = call.option("ignore_index", -100)
        t = tgt.detach().reshape(-1)
        valid = (t != ignore) & (t >= 0) & (t < c)
        counts = torch.zeros(c, device=t.device).scatter_add_(0, t.clamp(0, c - 1), valid.float())

        def done(v: list[float]) -> None:
            if self.class_counts is None:
                self.class_counts = v
            elif len(self.class_counts) == len(v):
                self.class_counts = [a + b for a, b in zip(self.class_counts, v)]
            h = label_entropy(self.class_counts)
            self._set_prior("cross_entropy", "", h, f"entropy of the labels; log({c}) = {math.log(c):.4f}")

        self.flags.add([counts], done)

    def _set_prior(self, loss: str, variant: str, value: float, what: str) -> None:
        if loss == "mse_loss" and self.targets.no_level:
            self.prior = None  # the loss adds several MSE terms, or weights it: one term's prior is no level of it
            return
        if value > 0 and math.isfinite(value):
            self.prior = (loss, variant, value, what)

    def _shift_target(self, tgt: torch.Tensor, ignore: int) -> None:
        """A token-level target: compared with the ids of the model call it is the loss of, the
        call open now (the loss computed inside forward: checked when that call returns, with its
        arguments) or else the last root call that returned."""
        if self.open_calls:
            model = self.open_calls[-1]
            if model not in self.probed:
                self.inner_targets.setdefault(id(model), (tgt.detach(), ignore))
        elif self.last_call is not None and self.last_call[0] not in self.probed:
            self._queue_shift(self.last_call, tgt, ignore)

    def _queue_shift(self, call: tuple[Any, ...], tgt: torch.Tensor, ignore: int) -> None:
        model, args, kwargs, frame = call
        nums = shift_share(tgt, token_ids(args, kwargs)[1], ignore)
        if nums is None:
            return
        self.probed.add(model)
        ref, step = weakref.ref(model), self._step

        def done(v: list[float]) -> None:
            if v[1] >= 4 and v[0] >= 0.9 * v[1]:
                self.probe_pending = (ref, args, kwargs, frame, step)

        self.flags.add(nums, done)

    def on_backward(self, roots: tuple[torch.Tensor, ...], grads: Any) -> None:
        if self.region is not None:
            self._leave_region()
        self.sched.backwards += 1
        if self.closures.open is not None:
            self.closures.backward()
        if self.writes.after:
            self.writes.after.clear()  # (a backward accumulates into .grad in place: no write of the program's)
        if self.order.tracking:
            self.order.backward(roots)
        if self._step < POOL_STEPS and self.targets.output is not None:
            self.targets.backward(self._step, roots[0] if roots else None, self.flags.add)
        if not self.sentinel and roots and isinstance(roots[0], torch.Tensor) and roots[0].numel() == 1:
            value = roots[0].detach().float()
            grad = grads[0] if isinstance(grads, (tuple, list)) and grads else grads
            if isinstance(grad, torch.Tensor) and grad.numel() == 1:
                # `D_real.backward(mone)`: the objective minimized is the root times its gradient
                # (a WGAN critic's output is maximized; its growth is the goal, not divergence)
                value = value * grad.detach().float().reshape(value.shape)
            self.flags.add([value], lambda v: self.session.record_series("loss", v[0]))

    def on_backward_end(self, roots: tuple[torch.Tensor, ...]) -> None:
        if self.closures.open is not None:
            self.closures.backward_end()

    def on_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        try:
            frames = user_frames(sys._getframe(1))
            self.groups.created(optimizer, frames)
            self.periodic.optimizer_built(frames)
        except Exception as e:  # our bug: the run goes on
            self.session.internal_error("dynamics.groups", e)

    def on_closure_call(self, optimizer: torch.optim.Optimizer) -> None:
        self.closures.closure_call(optimizer)

    def on_optimizer_step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        if self.region is not None:
            self._leave_region()
        self.stepped = True
        if self.closures.open is not None:
            self.closures.step_pre(optimizer)
        self.rebuilds.step_pre(optimizer, self._step)
        order = self.order
        order.in_step = True
        session = self.session
        step = session.step
        groups = optimizer.param_groups
        names = self.lr_series.get(id(optimizer))
        if names is None or len(names) != len(groups):
            names = self._lr_names(optimizer)
        lrs = [lr if type(lr := g.get("lr")) is float else lr_value(lr) for g in groups]
        for name, lr in zip(names, lrs):
            if name is not None:
                session.record_series(name, lr)
        for f in self.sched.observe(optimizer, lrs):
            self._add(f)
        self.groups.stepped(optimizer, lrs)
        self.periodic.stepped(optimizer, lrs, step)
        if id(optimizer) not in self.decay_checked:  # once per optimizer, at its first step
            self.decay_checked.add(id(optimizer))
            self.first_steps.add(step)
            if not self.bare.done:
                try:
                    self.bare.first_step(sys._getframe(1))
                except Exception as e:  # our bug: the run goes on
                    self.bare.done = True
                    session.internal_error("dynamics.freeze_missed_bare_parameter", e)
            self._add(decay_inverted(session, optimizer))
            missed = missed_norm_scales(session, optimizer, optimizer_frame(optimizer))
            if missed is not None:
                self.norm_decay[id(optimizer)] = missed
            if not self.bn_checked:
                self.bn_checked = True
                self.bn_fast = fast_batchnorms(session, step)
        if self.norm_decay:
            missed = self.norm_decay.get(id(optimizer))
            if missed is not None:
                missed.stepped(lrs)
        if self.phases.stepped(optimizer, step):
            # a new model trains from here: its gradient norms continue no earlier series
            self.norm_trends.clear()
        self._consume(optimizer)
        if order.tracking:
            for f in order.optimizer_step(optimizer):
                self._add(f)
        if step < 2 or step % self.every == 0:
            params = grad_params(optimizer)
            if params:
                sample = Sample(step, params, self._layers_of(params))
                self.samples[id(optimizer)] = sample
                self.flags.add(sample.grad_norms, functools.partial(self._layer_grads, step, sample.names))

    def _layers_of(self, params: list[torch.Tensor]) -> list[str]:
        """Each parameter's layer (the last parameter list asked about is remembered)."""
        refs, layers = self.layer_cache
        if len(refs) != len(params) or any(r() is not p for r, p in zip(refs, params)):
            layers = layer_names(self.session, params)
            self.layer_cache = ([weakref.ref(p) for p in params], layers)
        return layers

    def _lr_names(self, optimizer: torch.optim.Optimizer) -> list[str | None]:
        """The series names of `optimizer`'s groups' lr ("lr", then "lr[o.g]"; at most
        MAX_LR_SERIES in all, None past that)."""
        o = self.opt_index.setdefault(id(optimizer), len(self.opt_index))
        names: list[str | None] = []
        for g in range(len(optimizer.param_groups)):
            name = self.lr_names.get((o, g))
            if name is None and len(self.lr_names) < MAX_LR_SERIES:
                name = self.lr_names[(o, g)] = "lr" if (o, g) == (0, 0) else f"lr[{o}.{g}]"
            names.append(name)
        self.lr_series[id(optimizer)] = names
        return names

    def on_optimizer_step_post(self, optimizer: torch.optim.Optimizer) -> None:
        self.order.in_step = False
        if self.closures.open is not None:
            self._add(self.closures.step_post(optimizer, self._step))
        self.rebuilds.step_post(optimizer, self._step)
        if self.order.tracking:
            self.writes.stepped(optimizer)
        self.sched.optimizer_stepped(optimizer)
        if self.samples:
            sample = self.samples.pop(id(optimizer), None)
        else:
            return
        if sample is not None:
            names, norms = sample.update_norms()
            if norms:
                lr = optimizer.param_groups[0].get("lr")  # the rate of this step, not of the read's
                self.flags.add(norms, functools.partial(self._updates, sample.step, names, lr=lr))

    def on_step_end(self, step: int) -> None:
        if self.region is not None:
            self._leave_region()
        if step < self.warmup:
            self.open_calls.clear()
            self.inner_targets.clear()
            self.last_call = None
        if not self.stepped:  # no optimizer: the step's numbers were read at backward's end
            self._consume(None)
        self.stepped = False
        self.order.track(_cadence.sampled(step + 1))
        if self.sched.scheds:
            for f in self.sched.scheduler_findings():
                self._add(f)
        if len(self.flags):
            if self.sentinel:  # what the step's read filled; the rest rides the next read
                self.flags.resolve_read()
            else:
                self.flags.resolve()
        if self.probe_pending is not None:
            self._run_probe()
        if step < self.warmup or self.mix.busy:
            self._mix_findings(lambda: self.mix.step_end(step, self.warmup))

    def _mix_findings(self, run: Any) -> None:
        try:
            found = run()
        except Exception as e:  # our bug: the report goes on
            self.session.internal_error("dynamics.batchmix", e)
            return
        for f in found:
            self.session.add(f)  # (measured on the run's own batch: not held)

    def on_exception(self, exc: BaseException) -> None:
        self.open_calls.clear()  # a forward that raised never returns

    def on_end(self) -> None:
        self._leave_region()
        if self.region is not None:  # inside one of our own calls: cannot happen at close, be safe
            self.region.inside = 0
            self._leave_region()
        self._mix_findings(self.mix.flush)  # (their numbers ride the last read)
        self.flags.resolve()
        _deferred.leave(self.session, self.flags)
        self._consume(None)
        for f in self.sched.end_findings():
            self._add(f)
        try:
            for f in self.bare.findings():
                self.session.add(f)  # (a warning carries its measured harm: not held)
        except Exception as e:  # our bug: the report goes on
            self.session.internal_error("dynamics.freeze_missed_bare_parameter", e)
        try:
            for f in self.groups.findings() + self.periodic.findings():
                self._add(f)
        except Exception as e:  # our bug: the report goes on
            self.session.internal_error("dynamics.groups", e)
        self._add(self.order.config.finding())  # (a warning carries its measured harm: not held)
        self._add(self.order.partial.finding())  # (a warning carries its measured harm: not held)
        for f in self.order.targets.findings():  # (a warning carries its measured harm: not held)
            self._add(f)
        for f in self.order.flush():  # (decided on the last read)
            self._add(f)
        for missed in self.norm_decay.values():
            try:
                self._add(missed.finding())  # (a warning carries its measured harm: not held)
            except Exception as e:  # our bug: the report goes on
                self.session.internal_error("dynamics.norm_decay", e)
        self.norm_decay.clear()
        if self.bn_fast is not None:
            try:
                self._add(self.bn_fast.finding())  # (a warning carries its measured harm: not held)
            except Exception as e:  # our bug: the report goes on
                self.bn_fast.close()
                self.session.internal_error("dynamics.bn_momentum_last_batch", e)
            self.bn_fast = None
        for f in self.rebuilds.findings(self.session.health.points("loss")):
            self._add(f)  # (a warning carries its measured harm: not held)
        health = self.session.health
        self._add(grad_scale_restarts(health.points("grad_norm"), health.points("lr"), self.first_steps))
        self._run_probe()
        self._mix_findings(self.mix.judge)
        for f in self.harm.release():
            if self.harm.revised(f):
                self.session.revise(f)
            else:
                self.session.add(f)

    def _later_losses(self, step: int) -> tuple[str, list[float]] | None:
        """The other loss series (a later backward site) with the most losses after `step`."""
        health, best = self.session.health, None
        for name in health.names():
            if name == "loss" or not name.startswith("loss "):
                continue
            values = [v for s, v in health.points(name) if s > step and v is not None]
            if values and (best is None or len(values) > len(best[1])):
                best = (name, values)
        return best

    # ------------------------------------------------------------------ per-step numbers
    def _defer_findings(self, values: list[torch.Tensor], decide: Any) -> None:
        """Numbers that ride the step's one read; `decide(floats)` gives the findings to add."""
        def done(v: list[float]) -> None:
            for f in decide(v):
                self._add(f)
        self.flags.add(values, done)

    def _consume(self, optimizer: torch.optim.Optimizer | None) -> None:
        """The loss and grad norm the step's read produced (if new since the last call)."""
        h, seen = self.session.health, self.seen
        n = h.count("loss")
        if n != seen["loss"]:
            seen["loss"] = n
            self._loss(h.last("loss"))
        n = h.count("grad_norm")
        if n != seen["grad_norm"]:
            new = h.since("grad_norm", seen["grad_norm"])[-MAX_NORMS_PER_READ:]
            seen["grad_norm"] = n
            for at, v in new:
                self._grad_norm(at, v, optimizer)

    def _loss(self, v: float | None) -> None:
        if v is not None and not math.isfinite(v):
            self.harm.broke(self._step)
        if v is None or not math.isfinite(v):
            return
        if len(self.loss_head) < 10:
            self.loss_head.append(v)
        self.loss_recent.append(v)
        self.harm.loss(self._step, v)
        grow = self.loss_growth.add(self._step, v)
        if grow is not None:
            self.session.health.pin(grow["start"])
            self._add(finding("divergence", category=Category.NUMERICAL, stage=Stage.LOSS, step=grow["start"],
                              series="loss", start=grow["start"], first=num(grow["first"]), last=num(grow["last"]),
                              steps=grow["steps"], rate=f"{grow['rate']:.3g}",
                              evidence={"series": "loss", "start_step": grow["start"],
                                        "value_at_start": num(grow["first"]),
                                        "step_now": grow["end"], "value_now": num(grow["last"]),
                                        "growth_per_step": f"×{grow['rate']:.3g}", "lr": self._lr_text()}))
        if (self.prior is not None and self._step >= PRIOR_MIN_STEPS and self._step % 10 == 0
                and "prior" not in self.reported):
            loss, variant, prior, what = self.prior
            mean = None if loss == "mse_loss" and self.targets.no_level else at_prior(list(self.loss_recent), prior)
            if mean is not None:
                self.reported.add("prior")
                steps = self._step + 1
                self._add(finding("loss_at_prior", variant=variant or None, stage=Stage.LOSS, step=self._step,
                                  loss=loss, value=num(mean), steps=steps, prior=num(prior), what=what,
                                  evidence={"mean_of_last_20_losses": num(mean), "prior": num(prior), "prior_is": what,
                                            "first_loss": num(self.loss_head[0]), "steps": steps}))

    def _norm_trends(self, at: int) -> tuple[Spikes, Growth]:
        """The trends of the gradient norms read at the same place in their steps. Each optimizer
        step is read once: a GAN's discriminator and generator norms (orders of magnitude apart)
        share the "grad_norm" series, alternating; a model's norm is compared with its own."""
        place = self.norm_at[1] + 1 if at == self.norm_at[0] else 0
        self.norm_at = (at, place)
        trends = self.norm_trends.get(place)
        if trends is None:
            trends = self.norm_trends[place] = (Spikes(), Growth())
        return trends

    def _grad_norm(self, at: int, v: float | None, optimizer: torch.optim.Optimizer | None) -> None:
        spikes, growth = self._norm_trends(at)
        grow = growth.add(at, v)
        factor = spikes.add(v)
        if (grow is None and factor is None) or "exploding" in self.reported or self.loss_growth.done:
            return  # (a diverging loss is reported, with the same cause)
        if grow is not None and self.loss_recent and self.loss_head and self.loss_recent[-1] < self.loss_head[0]:
            return  # the norm grows from a small start while the loss falls: training, not exploding
        self.reported.add("exploding")
        layer, kind = self._largest_layer(optimizer)
        rnn = kind in _RECURRENT and not self.order.clip_seen
        step = grow["start"] if grow is not None else self._step
        self.session.health.pin(step)
        ev = {"grad_norm": num(v), "largest_layer": layer, "layer_type": kind, "clipping_seen": self.order.clip_seen}
        if grow is not None:
            ev.update(start_step=grow["start"], norm_at_start=num(grow["first"]),
                      growth_per_step=f"×{grow['rate']:.3g}")
        else:
            ev.update(spike_factor=f"×{factor:.3g}")
        self._add(finding("exploding_gradients", category=Category.GRADIENT, stage=Stage.BACKWARD, step=step,
                          module=layer, variant="growth" if grow is not None else None,
                          cause="dynamics.exploding_gradients.cause" + (".rnn" if rnn else ""),
                          norm=num(v), factor=f"{factor:.3g}" if factor else "",
                          layer="(root)" if layer == "" else (layer or "?"),
                          start=step, first=num(grow["first"]) if grow else "", steps=grow["steps"] if grow else 0,
                          evidence=ev))

    def _largest_layer(self, optimizer: torch.optim.Optimizer | None) -> tuple[str | None, str]:
        """The layer with the largest gradient norm now (an anomaly: one read, off the hot path)."""
        if optimizer is None:
            return None, ""
        params = grad_params(optimizer)
        if not params:
            return None, ""
        with torch.no_grad():
            norms = _deferred.read_scalars(foreach_norm([_local(p.grad) for p in params]))  # type: ignore[arg-type]
        layers = per_layer(layer_names(self.session, params), norms)
        top = max(layers, key=lambda k: layers[k])
        return top, layer_kind(self.session, top)

    def _layer_grads(self, step: int, names: list[str], values: list[float]) -> None:
        found = self.vanish.add(step, per_layer(names, values))
        if found is not None:
            # info: a layer whose gradient is tiny next to the largest one is a hint, not proof that
            # the run is wrong (a pretrained transformer's first key projection at step 0 is one)
            self._add(finding("vanishing_gradients", category=Category.GRADIENT, severity=Severity.INFO,
                              stage=Stage.BACKWARD, step=found["steps"][0],
                              module=found["layer"], layer=found["layer"], norm=num(found["norm"]),
                              ratio=f"{found['ratio']:.1e}", largest_layer=found["largest_layer"],
                              steps=found["steps"],
                              evidence={"layer_grad_norm": num(found["norm"]), "largest_layer": found["largest_layer"],
                                        "largest_grad_norm": num(found["largest"]), "ratio": f"{found['ratio']:.1e}",
                                        "sampled_steps": found["steps"]}))

    def _updates(self, step: int, names: list[str], values: list[float], lr: Any) -> None:
        ratio, _ = update_ratio(names, values)
        if ratio is None:
            return
        self.ratios.append((step, ratio))
        del self.ratios[:-8]
        last = self.ratios[-2:]
        losses = self.loss_head + list(self.loss_recent)
        if (len(last) == 2 and all(r < TINY_UPDATE for _, r in last) and self._step >= 20
                and loss_not_lower(losses) and "stagnation" not in self.reported):
            self.reported.add("stagnation")
            self._add(finding("stagnation", stage=Stage.OPTIMIZER, step=last[0][0], first=num(losses[0]),
                              last=num(losses[-1]), steps=self._step, ratio=f"{last[-1][1]:.1e}", lr=num(lr_value(lr)),
                              evidence={"update_to_parameter_ratio": [f"{r:.1e}" for _, r in last],
                                        "sampled_steps": [s for s, _ in last], "healthy_ratio": "~1e-3",
                                        "loss_first": num(losses[0]), "loss_last": num(losses[-1]),
                                        "lr": num(lr_value(lr)), "clip_grad_norm_seen": self.order.clip_seen}))

    def _lr_text(self) -> str | None:
        lr = self.session.health.last("lr")
        return num(lr) if lr is not None else None

    def _run_probe(self) -> None:
        pending, self.probe_pending = self.probe_pending, None
        if pending is None:
            return
        ref, args, kwargs, frame, step = pending
        model = ref()
        if model is not None:
            f = probe(model, args, kwargs, frame)
            if f is not None:
                self._add(f.replace(step=step))
