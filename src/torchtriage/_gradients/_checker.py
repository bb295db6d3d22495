"""`GradientChecker`: the gradient chain inside a session (`watch` / `run`).

Cost model. Heavy evidence (the op tracer, per-module records, graph walks, grad max-abs
flags) is gathered only during the analysis window, the first `gradients_window` steps
(default 2), and concluded once at the window's end (one host read). After it, two cheap
checks stay on for the whole run, both pure Python attribute reads with no kernel:
a loss without `grad_fn` at each backward, and `zero_grad` missing (a grad tensor that is
still the very object, at the same version, that the previous `optimizer.step()` used).

Screening. The window's first step runs without per-module events (they put every module call
of the model on PyTorch's slow call path, through two Python hooks, and queue a device flag per
Linear / Conv output): the graph walk, the gradients' max-abs, the op tracer (which finds the
module of a cut from the Python stack instead) and the optimizers' coverage say whether
anything at all is wrong. When nothing is, the window ends there, clean (on a correct loop: one
step of analysis instead of two). When something is, the next step(s) of the window run with
the module events as well, and the findings are those of the whole window, as without the
screen. The screen needs a step that the optimizer closes (the session re-installs the module
hooks between steps): in a session without an optimizer it is off.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn as nn

from .. import _deferred
from .._checker import Checker
from .._findings import Finding, Severity, Stage
from .._frames import user_frame_from_stack
from ._analysis import Analysis, _first_tensor, add_model, make_finding
from ._graph import reach
from ._harm import JUDGED, judge
from ._idle import IdleOptimizers
from ._loss import explain_loss_without_grad
from ._pathcut import grad_lost_at
from ._static import frozen_findings, hidden_trainable, registration_findings
from ._tracer import CutRecord, CutTracer, module_being_called, pop, push
from ._zero_later import ZeroLater

_SAMPLE = 4  # parameters per optimizer sampled for the zero_grad check
# The window stays open up to this many extra steps until every watched optimizer has stepped
# once: a WGAN's generator steps once per 5 critic steps, and its parameters cannot be judged
# before it does.
_EXTEND = 10


class GradientChecker(Checker):
    """Why a parameter's grad is None, zero, or never applied (category "gradient").

    Session options: `gradients_window` (steps analysed in depth, default 2),
    `gradients_trace_ops` (record cut ops with a TorchFunctionMode in the window, default True).
    """

    name = "gradients"

    def __init__(self) -> None:
        super().__init__()
        self.window = 2
        self.analysis: Analysis | None = None
        self.tracer: CutTracer | None = None
        self._grad_reads: set[int] = set()
        self._concluded = False
        self._stack: list[str] = []
        # The screening step(s): no module events yet (see the module docstring); then, when the
        # screen saw something, module evidence up to `_evidence_until` at least.
        self._screen = True
        self._evidence_until = -1
        self._module_events = 0  # module events received in the window (evidence steps)
        self._tracer_lingers = False  # concluded clean; the tracer goes when the next step begins
        self._step_cuts: list[CutRecord] = []
        self._root_calls: list[tuple[bool, bool, Any]] = []
        self._first_step: int | None = None
        self._samples: dict[int, list[tuple[Any, Any, int]]] = {}
        self._carried: dict[int, bool] = {}
        self._zero_grad_reported = False
        self._eval_pending: tuple[str, Any, int | None] | None = None
        self._stepped: set[int] = set()  # optimizers that stepped inside the window
        # Verdicts that later steps may overturn, held until the end of the session:
        # module path -> "never called" finding (a branch taken on some steps only: MoE experts,
        # an auxiliary loss every k steps, stochastic depth); (optimizer, group) -> lr-zero
        # finding of a scheduled group (a per-epoch warmup from 0).
        self._held_unused: dict[str, Finding] = {}
        self._held_lr: dict[tuple[int, int], Finding] = {}
        self._idle = IdleOptimizers()  # optimizers that never step while their parameters get grads
        self._held_idle: dict[int, Finding] = {}
        self._held_harm: list[Finding] = []  # no-gradient warnings judged by the loss at the end
        # unregistered tensors / modules: reported at the end unless some optimizer holds them or
        # they were updated in place (a tensor kept outside parameters() but trained on purpose)
        self._held_hidden: list[tuple[Finding, list[tuple[Any, int]]]] = []
        self._versions: dict[int, list[tuple[Any, int]]] = {}  # id(finding) -> its parameters' versions
        self._zero_later = ZeroLater()  # gradient.zero, judged over the whole run
        self._loss_cuts: set[tuple[str | None, int | None]] = set()  # lines a loss_no_grad_fn named
        self._path_cut = False  # a loss without grad_fn lost it at a taped op on its path (`_pathcut`)
        self._loss_models: set[str] = set()  # labels of models whose no-grad forward made such a loss

    # ------------------------------------------------------------------ helpers
    @property
    def active(self) -> bool:
        return not self._concluded and self.session is not None and self._in_window(self.session.step)

    def _in_window(self, step: int) -> bool:
        end = self.window + (self._first_step or 0)
        if step < end or step <= self._evidence_until:
            return True
        if step >= end + _EXTEND or self.session is None:
            return False
        optimizers = self.session.optimizers
        if any(id(o) not in self._stepped for o in optimizers):
            return True
        # A scheduled group that stepped at lr 0 (a warmup from 0) moved nothing on those steps:
        # parameters behind a zero-initialised gate (ReZero, zero-init residual BN, LoRA's B)
        # still get exactly zero gradients. Wait for a backward after a real update.
        a = self.analysis
        return a is not None and any(
            zero and steps - zero < 2 and _scheduled(optimizers, {"optimizer": oi, "group": gi})
            for (oi, gi), (zero, steps) in a.lr_zero.items())

    def _add(self, finding: Finding) -> None:
        assert self.session is not None
        self.session.add(finding)

    def _context(self) -> tuple[int | None, str | None]:
        s = self.session
        if self._screen and s is not None:
            return s.step, module_being_called(s.module_name)  # no module hooks on this step
        return (s.step if s else None, self._stack[-1] if self._stack else None)

    def _ignore(self) -> bool:
        s = self.session
        return s is None or s.busy or s.stage is Stage.OPTIMIZER

    def _on_cut(self, rec: CutRecord) -> None:
        if rec.kind == "nonleaf_grad":
            self._add(make_finding("gradient.nonleaf_grad", Severity.WARNING, Stage.BACKWARD, module=rec.module,
                                   op=rec.op, frame=rec.frame, shape=list(rec.shape or ()), is_leaf=False,
                                   retains_grad=False))
            return
        self._step_cuts.append(rec)
        if self.analysis is not None:
            self.analysis.add_cut(rec)

    def _models(self) -> list[tuple[nn.Module, str]]:
        s = self.session
        return [(m, s.model_label(m) or type(m).__name__) for m in s.models] if s else []

    def _opt_index(self, optimizer: torch.optim.Optimizer) -> int:
        opts = self.session.optimizers if self.session else []
        return next((i for i, o in enumerate(opts) if o is optimizer), -1)

    # ------------------------------------------------------------------ lifecycle
    def on_start(self, session: Any) -> None:
        self.window = int(session.options.get("gradients_window", 2))
        self._screen = self.window >= 2 and bool(session.options.get("gradients_screen", True))
        if session.options.get("gradients_trace_ops", True):
            self.tracer = CutTracer(self._on_cut, self._context, self._ignore)
            self._grad_reads = self.tracer.grad_reads
            push(self.tracer)

    def on_model(self, model: nn.Module, label: str) -> None:
        # A watched model frozen as a whole is a teacher, an EMA copy or a reference net: not
        # worth an info (had it been meant to train, the loss without grad_fn says so loudly).
        frozen = [f for f in frozen_findings(model) if f.module != ""]
        hidden = hidden_trainable(model)
        for f in registration_findings(model) + frozen:
            tensors = hidden.get(f.parameter or "") if f.code in _HIDDEN else None
            if tensors:  # judged at the end: an optimizer built later may hold them (a NAS architecture)
                self._held_hidden.append((f, [(weakref.ref(t), t._version) for t in tensors]))
            else:
                self._add(f)
        if self.analysis is not None and self.active:
            add_model(self.analysis, model, label)

    def on_step_begin(self, step: int) -> None:
        if self._tracer_lingers:
            self._drop_tracer()
        if self._first_step is None:
            self._first_step = step
            if self._screen and self.session is not None and not self.session.optimizers:
                self._stop_screening()  # no optimizer closes the steps: no safe point to re-hook
        if self.active and self.analysis is None:
            sess = self.session
            assert sess is not None  # a step is only seen while attached
            self.analysis = Analysis(self._models(), params=lambda: sess.param_index.tensors())
            self.analysis.grad_reads = self._grad_reads  # one set, filled by the tracer
            self.analysis.modules_seen = not self._screen
            _deferred.ride(self.session, self.analysis.flags)
            # Cuts recorded before the first step opened (code before the first forward).
            for rec in self._step_cuts:
                self.analysis.add_cut(rec)

    def wants_module_events(self) -> bool:
        # The analysis window after its screening step, and "never called" verdicts still
        # waiting for a later call.
        s = self.session
        screening = self._screen and s is not None and bool(s.optimizers)
        return (self.active and not screening) or bool(self._held_unused)

    def on_forward_pre(self, module: nn.Module, name: str, args: tuple[Any, ...]) -> None:
        if self.active and not self._screen:
            self._stack.append(name)

    def on_forward(self, module: nn.Module, name: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                   output: Any) -> None:
        if self._held_unused and torch.is_grad_enabled():
            for path in [p for p in self._held_unused if name == p or name.startswith(p + ".") or not p]:
                del self._held_unused[path]
        if not self.active or self._screen:
            return
        self._module_events += 1
        if self._stack:
            self._stack.pop()
        if self.analysis is not None:
            self.analysis.modules_seen = True
            self.analysis.module_ran(module, name, output, lambda: user_frame_from_stack(2))

    def on_root_forward(self, model: nn.Module, label: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                        output: Any) -> None:
        if self._eval_pending is not None:
            self._flush_eval()
        if model.training and self._concluded:
            return  # (the steady state's common case: nothing to look at)
        out = _first_tensor(output)
        grad_on = torch.is_grad_enabled()
        if self.active:
            self._root_calls.append((grad_on, torch.is_inference_mode_enabled(), user_frame_from_stack(2)))
            if self.analysis is not None:
                self.analysis.note_inputs(args, kwargs)
        if not model.training and grad_on and out is not None and out.requires_grad:
            self._eval_pending = (label, user_frame_from_stack(2), self.session.step if self.session else None)

    def on_backward(self, roots: tuple[torch.Tensor, ...], grads: Any) -> None:
        self._eval_pending = None
        self._check_carried()
        s = self.session
        step = s.step if s else None
        for r in roots:
            if isinstance(r, torch.Tensor) and not r.requires_grad:
                snap = s.snapshot if s is not None else None
                calls = snap.record.sources_of(r) if snap is not None and snap.record.taped else []
                sources = [(c.grad_enabled, c.inference, c.frame) for c in calls]
                # the models whose no-grad forward made this loss: their cut is this finding
                self._loss_models |= {c.label for c in calls if not c.grad_enabled}
                lost = grad_lost_at(snap.record.ops, r) if snap is not None and snap.record.taped else None
                f = explain_loss_without_grad(
                    r, self._step_cuts, self._root_calls, [m for m, _ in self._models()], step=step,
                    backward_frame=user_frame_from_stack(2), sources=sources, lost_at=lost)
                self._loss_cuts.add((f.file, f.line))
                if lost is not None and f.evidence.get("lost_at"):
                    self._path_cut = True  # every parameter's missing gradient is this one cut
                self._add(f)
        if self.active and self.analysis is not None:
            self.analysis.backward_roots(reach(roots))

    def on_nested_backward(self, roots: tuple[torch.Tensor, ...]) -> None:
        # The parameters inside a reentrant checkpoint are reached through this inner backward;
        # its roots' leaves are detached copies of the block's inputs, not strangers.
        if self.active and self.analysis is not None:
            self.analysis.backward_roots(reach(roots), inner=True)

    def on_backward_end(self, roots: tuple[torch.Tensor, ...]) -> None:
        if self.active and self.analysis is not None:
            self.analysis.grads_after_backward()

    def on_optimizer_step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        oid = id(optimizer)
        # The silent-bug check reports the same loop mistake earlier, at the backward() line;
        # one finding per cause, so this one speaks only when that check is not running.
        if self._carried.pop(oid, False) and not self._zero_grad_reported and not self._silent_on():
            self._zero_grad_reported = True
            sample = self._samples.get(oid, [])
            p = sample[0][0]() if sample else None
            name = self.session.param_index.name(p) if self.session is not None else None
            self._add(make_finding("gradient.zero_grad_missing", Severity.WARNING, Stage.BACKWARD,
                                   parameter=name, op=type(optimizer).__name__, frame=user_frame_from_stack(2),
                                   optimizer=self._opt_index(optimizer), grad_same_tensor_as_last_step=True))
        if oid in self._held_idle:
            del self._held_idle[oid]  # it steps after all (a generator after its warm-up)
        if self.active:
            if self.session is not None:
                self._idle.at_step(self.session.optimizers, self._stepped)
            self._stepped.add(oid)
            if self.analysis is not None:
                self.analysis.optimizer_step(self._opt_index(optimizer), optimizer)
        if self._held_lr:
            index = self._opt_index(optimizer)
            for gi, group in enumerate(optimizer.param_groups):
                lr = group.get("lr")
                if isinstance(lr, (int, float)) and lr > 0:
                    self._held_lr.pop((index, gi), None)

    def on_optimizer_step_post(self, optimizer: torch.optim.Optimizer) -> None:
        if self._zero_grad_reported:
            return
        if self._silent_on():
            # that check reports a missing zero_grad (see on_optimizer_step_pre): no sample to keep
            if self._samples:
                self._samples, self._carried = {}, {}
            return
        sample: list[tuple[Any, Any, int]] = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is not None:
                    sample.append((weakref.ref(p), weakref.ref(g), g._version))
                    if len(sample) == _SAMPLE:
                        break
            if len(sample) == _SAMPLE:
                break
        self._samples[id(optimizer)] = sample

    def _silent_on(self) -> bool:
        s = self.session
        return s is not None and s.checker("silent") is not None

    def on_step_end(self, step: int) -> None:
        # A step opens at its first forward / backward; code before it (a loss rebuilt from
        # .item()) belongs to it too, so per-step records are cleared at the end, not the start.
        self._step_cuts = []
        self._root_calls = []
        if self.tracer is not None:
            self.tracer.new_step()
        if self._first_step is None or self._concluded:
            return
        if self._screen and self.analysis is not None:
            self._screened(step)
        elif not self._in_window(step + 1):
            if self._module_events == 0 and self._evidence_until >= 0 and self._models() \
                    and step + 1 < self.window + (self._first_step or 0) + _EXTEND:
                # No module event reached the evidence step (the session re-installs its module
                # hooks only between optimizer steps): one more step, within the extension.
                self._evidence_until = step + 1
                return
            self._conclude(step)

    def _stop_screening(self) -> None:
        self._screen = False
        self._stack = []

    def _screened(self, step: int) -> None:
        """End of a screening step: conclude clean, or analyse the next step with module events."""
        s = self.session
        assert s is not None and self.analysis is not None
        waiting = any(id(o) not in self._stepped for o in s.optimizers) and self._in_window(step + 1)
        # (an optimizer that has not stepped yet, a WGAN's generator, a student trained after its
        # teacher: the window goes on, with the module events, as without the screen)
        found = None if waiting else self._pending_findings()
        if found is not None and not found:
            self._conclude(step, tracer_until_next_step=True, found=found)  # nothing to explain: ends clean
            return
        self._stop_screening()
        self._evidence_until = step + 1

    def _pending_findings(self) -> list[Finding] | None:
        """The findings the evidence so far supports (the flags' read rode the step's); None when
        concluding failed (the full window and its error handling decide)."""
        assert self.session is not None and self.analysis is not None
        try:
            return self.analysis.conclude(self.session.optimizers, step=self._first_step)
        except Exception:
            return None

    def on_end(self) -> None:
        self._flush_eval()
        self._conclude(self.session.step if self.session else None)
        losses = self.session.health.values("loss") if self.session is not None else []
        unmoved = [f for f in [*self._held_unused.values(), *self._held_harm] if not self._moved(f)]
        self._versions = {}
        held = [*(judge(f, losses) for f in unmoved),
                *self._held_lr.values(), *self._held_idle.values(),
                *(judge(f, losses) for f in self._zero_later.release())]
        held += [f for f, tensors in self._held_hidden if not self._trained(tensors)]
        self._held_hidden = []
        self._held_unused, self._held_lr, self._held_idle, self._held_harm = {}, {}, {}, []
        for f in sorted(held, key=lambda f: f.step if f.step is not None else -1):
            self._add(f)
        if self._tracer_lingers:
            self._drop_tracer()
        if self.tracer is not None:
            pop(self.tracer)
            self.tracer = None

    # ------------------------------------------------------------------ conclusions
    def _check_carried(self) -> None:
        # Sync-free: same grad tensor object at the same version as when the optimizer last
        # stepped means nothing reset it; the coming backward accumulates onto it. Only the
        # last backward before the optimizer's next step decides (a GAN's G step may add into
        # D's grads; D clears them before its own backward).
        for oid, sample in self._samples.items():
            carried = False
            for pref, gref, version in sample:
                p = pref()
                g = p.grad if p is not None else None
                if g is not None and g is gref() and g._version == version:
                    carried = True
            self._carried[oid] = carried

    def _flush_eval(self) -> None:
        if self._eval_pending is None:
            return
        label, frame, step = self._eval_pending
        self._eval_pending = None
        self._add(make_finding("gradient.eval_builds_graph", Severity.INFO, Stage.FORWARD, module="", frame=frame,
                               step=step, model=label, training=False, grad_enabled=True, output_requires_grad=True))

    def _conclude(self, step: int | None, *, tracer_until_next_step: bool = False,
                  found: list[Finding] | None = None) -> None:
        if self._concluded:
            return
        self._concluded = True
        if tracer_until_next_step:
            # The step's code after optimizer.step() (logging, a `.grad` read) belongs to it: the
            # tracer stays until the next step begins (`_drop_tracer`).
            self._tracer_lingers = True
        else:
            self._drop_tracer()
        analysis, self.analysis = self.analysis, None
        if analysis is None or self.session is None:
            return
        _deferred.leave(self.session, analysis.flags)
        optimizers = self.session.optimizers
        self._held_idle.update(self._idle.findings(self.session, optimizers, self._stepped, self._first_step,
                                                   make_finding))
        labels = [label for _, label in self._models()]
        only_label = labels[0] if len(labels) == 1 else None
        for f in analysis.conclude(optimizers, step=self._first_step) if found is None else found:
            if f.code.startswith("gradient.cut_") and ((f.file, f.line) in self._loss_cuts or self._path_cut):
                continue  # the loss without grad_fn already named this cut and its line: one cause, once
            if f.code == "gradient.cut_no_grad" and self._loss_models and \
                    f.evidence.get("model", only_label) in self._loss_models:
                continue  # that model's no-grad forward made the loss: the same cut, named there
            if f.code in JUDGED:
                # Parameters used without calling their module (MultiheadAttention's out_proj,
                # read by F.multi_head_attention_forward) or reached on later steps only (an
                # encoder under no_grad for its first updates) move later: their versions now.
                self._versions[id(f)] = [(weakref.ref(t), t._version) for t in self._params_named(f)]
            if f.code == "gradient.unused" and f.module is not None:
                self._held_unused[f.module] = f
            elif f.code == "gradient.lr_zero" and _scheduled(optimizers, f.evidence):
                self._held_lr[(f.evidence["optimizer"], f.evidence["group"])] = f
            elif f.code in _JUDGED_LATER and self._zero_later.hold(f, self._params_named(f)):
                pass  # dropped at the end if the parameters get a gradient later (a gate that opens,
                # an encoder kept under no_grad for its first updates, layer-local training)
            elif f.code in JUDGED and f.severity is Severity.WARNING:
                self._held_harm.append(f)  # its severity from the run's loss, at the end (`_harm.py`)
            else:
                self._add(f)

    def _trained(self, tensors: list[tuple[Any, int]]) -> bool:
        """Every one of these tensors is trained after all: an optimizer of the session holds it,
        or something updated it in place (its version moved)."""
        held = {id(p) for o in (self.session.optimizers if self.session else [])
                for g in o.param_groups for p in g["params"]}
        alive = [(t, version) for ref, version in tensors if (t := ref()) is not None]
        return bool(alive) and all(id(t) in held or t._version != version for t, version in alive)

    def _moved(self, f: Finding) -> bool:
        """Some parameter of `f` was updated after the window (an optimizer skips one whose grad
        is None): it got its gradient after all."""
        return any((t := ref()) is not None and t._version != version for ref, version in self._versions.get(id(f), []))

    def _params_named(self, f: Finding) -> list[torch.Tensor]:
        names = set(f.evidence.get("parameters") or ([f.parameter] if f.parameter else []))
        if self.session is None or not names:
            return []
        return [t for t, info in self.session.param_index.tensors() if info.qualname in names]

    def _drop_tracer(self) -> None:
        self._tracer_lingers = False
        if self.tracer is not None:
            if self.tracer.failed is not None and self.session is not None:
                self.session.internal_error("gradients.tracer", self.tracer.failed)
            if pop(self.tracer):
                self.tracer = None


# Verdicts about gradients that did not arrive in the window, judged over the whole run.
_JUDGED_LATER = ("gradient.zero", "gradient.cut_no_grad")
_HIDDEN = ("gradient.unregistered_tensor", "gradient.unregistered_modules")


def _scheduled(optimizers: list[torch.optim.Optimizer], evidence: Any) -> bool:
    """The group's lr is driven by a scheduler from a positive base lr (`initial_lr`, set by
    every torch.optim.lr_scheduler): 0 now is a phase of the schedule, not the setting."""
    oi, gi = evidence.get("optimizer"), evidence.get("group")
    if not isinstance(oi, int) or not 0 <= oi < len(optimizers):
        return False
    groups = optimizers[oi].param_groups
    base = groups[gi].get("initial_lr") if isinstance(gi, int) and gi < len(groups) else None
    return isinstance(base, (int, float)) and base > 0
