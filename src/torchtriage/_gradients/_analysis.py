"""Evidence about one run's gradient chain, and the findings it supports.

Both entry points feed an `Analysis`: the session's `GradientChecker` over its first steps
(the analysis window) and `diagnose_gradients` from one probe. `conclude()` then classifies
every trainable parameter — reached by a backward or not, grad zero or not, updated or not —
and names one cause per group of parameters, in this order (the first that applies):

    module never called                    → gradient.unused
    a recorded cut (item / detach / no_grad op) on a tensor depending on it
                                           → gradient.cut_to_python / cut_detach / cut_no_grad
    every call of its module under no_grad → gradient.cut_no_grad
    its module's output does not require grad although the module ran with grad enabled
                                           → gradient.cut_in_module
    otherwise                              → gradient.unreached

Parameters that no optimizer holds and that get no gradient are not trained on purpose
(EMA / teacher / target networks): no finding.

A raw tensor an optimizer holds (`Adam([image])`, a mixture's `means_coef`; issue 11) is a
parameter like any other: the same causes apply to it, minus the module ones (it has none),
and it is never a stray leaf. `params()` gives the parameters to judge: the session's index
(`session.param_index.tensors`), or the models' parameters for a one-off probe.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import re
import weakref
from typing import Any

import torch
import torch.nn as nn

from .._catalogue import has_message
from .._deferred import DeferredFlags, read_scalars
from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, optimizer_frame
from ._static import ParamInfo, index_parameters, unregistered_leaf_ids
from ._tracer import CutRecord

_CUT_KINDS = ("to_python", "detach", "no_grad", "inference_mode")
_MODES = {"": "torch.no_grad()", "inference_mode": "torch.inference_mode()"}
_CUT_CODES = {"to_python": "cut_to_python", "detach": "cut_detach", "no_grad": "cut_no_grad",
              "inference_mode": "cut_no_grad"}


@dataclasses.dataclass
class ModuleRun:
    """How a module was called during the window."""

    name: str
    grad_calls: int = 0
    train_calls: int = 0  # grad-enabled calls in train() mode
    frame: UserFrame | None = None
    nograd_frame: UserFrame | None = None
    inference: bool = False  # its no-grad calls ran under inference_mode
    cut_inside: bool = False
    cut_frame: UserFrame | None = None
    positive: torch.Tensor | None = None  # device flag: some output value > 0


def make_finding(code: str, severity: Severity, stage: Stage, *, module: str | None = None,
                 parameter: str | None = None, op: str | None = None, frame: UserFrame | None = None,
                 step: int | None = None, variant: str = "", wording: str = "", **fields: Any) -> Finding:
    key = code.split(".", 1)[1]
    fmt = dict(fields, module=module if module else "<root>", parameter=parameter or "", op=op or "")
    if frame is not None:
        fmt.setdefault("line", f"{frame.file}:{frame.line}")
        fmt.setdefault("source", frame.source)
    fmt.setdefault("line", "?")
    fmt.setdefault("source", "")
    suffix = f".{variant}" if variant else ""
    return from_catalogue(Category.GRADIENT, code, _variant_key(f"gradients.{key}.message", wording or variant),
                          fields=fmt, cause_key=f"gradients.{key}.cause{suffix}",
                          next_key=f"gradients.{key}.next{suffix}", frame=frame, evidence=fields,
                          severity=severity, stage=stage, step=step, module=module, parameter=parameter, op=op)


def _variant_key(key: str, variant: str) -> str:
    # A variant may reword the message too (a raw tensor has no module to name; issue 11).
    return f"{key}.{variant}" if variant and has_message(f"{key}.{variant}") else key


def _parent(path: str | None) -> str | None:
    if not path:
        return None
    return path.rpartition(".")[0]


class Analysis:
    """Evidence collected over the window; `conclude()` turns it into findings."""

    def __init__(self, models: list[tuple[nn.Module, str]],
                 params: Any = None) -> None:
        self.models = [(weakref.ref(m), label) for m, label in models]
        # () -> [(tensor, ParamInfo)]: every parameter (module ones and raw optimizer tensors)
        self.params_fn = params
        self.params: dict[int, ParamInfo] = index_parameters(models)
        self.names0 = {(info.root, info.qualname): pid for pid, info in self.params.items()}
        self.runs: dict[int, ModuleRun] = {}
        self.cuts: list[CutRecord] = []
        self.reached: set[int] = set()
        self.reach_complete = True
        self.backwards = 0
        # Max-abs grad per parameter, queued on the device at each backward and read along with
        # the step's one read (the non-finite sentinel's) when the session rides this queue.
        self.flags = DeferredFlags()
        self.norms: list[tuple[list[int], list[float]]] = []
        self._nonzero: set[int] = set()
        # Leaves requiring grad that were passed straight into a watched model: inputs whose
        # gradient the user wants (gradient penalty, adversarial examples, saliency).
        self.input_leaves: set[int] = set()
        self.versions: dict[int, int] = {}
        self.foreign_leaves: dict[int, tuple[list[int], int | None]] = {}
        self._leaf_grads: dict[int, list[tuple[Any, int | None, int]]] = {}
        self.grad_reads: set[int] = set()  # leaves whose .grad the user's code read (the op tracer's)
        self.lr_zero: dict[tuple[int, int], list[int]] = {}  # (opt index, group) -> [zero steps, steps]
        self.forward_seen = True  # False when only a finished loss tensor is known (no forward records)
        # False while no module event was seen (a session that ended in the gradient check's
        # screening step): a module without a record is then unknown, not "never called".
        self.modules_seen = True
        # cut record id -> ids of the parameters of the first optimizer that stepped after it:
        # a cut matters to a parameter when that parameter's own update followed it (a GAN's
        # D step detaches G's output on purpose; only D's optimizer steps after that cut).
        self._unstepped: list[CutRecord] = []
        self.stepped_after: dict[int, set[int]] = {}
        self.stepped_opts: set[int] = set()  # indexes of the optimizers that stepped in the window
        # parameters no backward reached whose .grad was non-zero at their optimizer's step: the
        # gradient was set by hand (Reptile's meta - fast, evolution strategies): they train
        self.hand: set[int] = set()

    # ------------------------------------------------------------------ feeding
    def live_models(self) -> list[tuple[nn.Module, str]]:
        return [(m, label) for r, label in self.models if (m := r()) is not None]

    def add_cut(self, rec: CutRecord) -> None:
        self.cuts.append(rec)
        self._unstepped.append(rec)

    def module_ran(self, module: nn.Module, name: str, output: Any, frame_fn: Any) -> None:
        run = self.runs.get(id(module))
        if run is None:
            run = self.runs[id(module)] = ModuleRun(name)
        grad_on = torch.is_grad_enabled()
        if grad_on:
            run.grad_calls += 1
            run.train_calls += module.training
            if run.frame is None:
                run.frame = frame_fn()
        else:
            if run.nograd_frame is None:
                run.nograd_frame = frame_fn()
                run.inference = torch.is_inference_mode_enabled()
        out = _first_tensor(output)
        if out is None or not out.is_floating_point():
            return
        own = [p for p in module._parameters.values() if p is not None and p.requires_grad]
        if grad_on and own and not out.requires_grad and not run.cut_inside:
            run.cut_inside, run.cut_frame = True, frame_fn()
        if own and isinstance(module, (nn.Linear, nn.modules.conv._ConvNd)) and out.numel():
            # Sync-free: a flag on the output's device, read once in conclude(). Hidden from the
            # op tracer: our own detach must not read as a cut in the user's forward.
            with torch._C.DisableTorchFunction():
                flag = (out.detach() > 0).any()
            run.positive = flag if run.positive is None else (run.positive | flag)

    def note_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        for a in (*args, *kwargs.values()):
            if isinstance(a, torch.Tensor) and a.requires_grad and a.is_leaf and id(a) not in self.params:
                self.input_leaves.add(id(a))

    def backward_roots(self, reach: Any, *, inner: bool = False) -> None:
        self.reached |= reach.leaves.keys()
        if inner:  # a reentrant checkpoint's backward: more reached leaves, nothing else
            return
        self.backwards += 1
        self.reach_complete &= reach.complete
        for lid, t in reach.leaves.items():
            # An nn.Parameter is registered somewhere (another model, or re-created in forward:
            # param_recreated says so); only plain tensors created with requires_grad=True count.
            if lid not in self.params and lid not in self.foreign_leaves and not isinstance(t, nn.Parameter):
                self.foreign_leaves[lid] = (list(t.shape), None)
            if lid in self.foreign_leaves:
                # Its .grad before this backward (same object, growing version: accumulating)
                g = t.grad
                seen = self._leaf_grads.setdefault(lid, [])
                seen.append((weakref.ref(t), id(g) if g is not None else None, g._version if g is not None else -1))

    def all_params(self) -> list[torch.Tensor]:
        """Every parameter to judge: the session's index when given, else the models'."""
        if self.params_fn is not None:
            return [t for t, _ in self.params_fn()]
        return [p for model, _ in self.live_models() for p in model.parameters()]

    def grads_after_backward(self) -> None:
        """Max-abs of every reached parameter's grad, on device (read in conclude)."""
        by_device: dict[Any, tuple[list[int], list[torch.Tensor]]] = {}
        for p in self.all_params():
            pid = id(p)
            if pid not in self.reached or p.grad is None or p.grad.is_sparse:
                continue
            self.versions.setdefault(pid, p._version)
            ids, grads = by_device.setdefault((p.grad.device, p.grad.dtype), ([], []))
            ids.append(pid)
            grads.append(p.grad)
        for (device, _), (ids, grads) in by_device.items():
            with torch.no_grad():
                if device.type != "cpu":  # one fused launch
                    norms = torch.stack(torch._foreach_norm(grads, float("inf")))
                    self.flags.add([norms], functools.partial(self._keep_norms, ids))
                    continue
                # On the CPU the foreach inf-norm takes a slow path (3 ms for a 1 M-parameter
                # model, 8x the min and max of each gradient): the max-abs from those instead.
                # (one op per gradient: its mins, then its maxes, stacked once)
                lo, hi = [], []
                for g in grads:
                    mm = torch.aminmax(g) if g.numel() else (g.new_zeros(()), g.new_zeros(()))
                    lo.append(mm[0])
                    hi.append(mm[1])
                self.flags.add([torch.stack(lo + hi)], functools.partial(self._keep_max_abs, ids))

    def _queue_hand_grads(self, optimizer: torch.optim.Optimizer) -> None:
        """Max-abs of the `.grad` of the parameters no backward reached (on device, read with
        the step's read): non-zero is a gradient set by hand."""
        by_device: dict[Any, tuple[list[int], list[torch.Tensor]]] = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                g = p.grad
                pid = id(p)
                if pid in self.reached or pid in self.hand or g is None or g.is_sparse or not g.numel():
                    continue
                ids, grads = by_device.setdefault(g.device, ([], []))
                ids.append(pid)
                grads.append(g)
        for ids, grads in by_device.values():
            with torch.no_grad(), torch._C.DisableTorchFunction():
                flag = torch.stack([g.detach().abs().amax().float() for g in grads])
            self.flags.add([flag], functools.partial(self._keep_hand, ids))

    def _keep_hand(self, ids: list[int], vals: list[float]) -> None:
        self.hand.update(pid for pid, v in zip(ids, vals) if v != 0)

    def _keep_norms(self, ids: list[int], vals: list[float]) -> None:
        self.norms.append((ids, vals))

    def _keep_max_abs(self, ids: list[int], minmax: list[float]) -> None:
        self.norms.append((ids, _max_abs(minmax)))

    def optimizer_step(self, index: int, optimizer: torch.optim.Optimizer, *, require_grad: bool = True) -> None:
        self.stepped_opts.add(index)
        self._queue_hand_grads(optimizer)
        if self._unstepped:
            ids = {id(p) for g in optimizer.param_groups for p in g["params"]}
            for rec in self._unstepped:
                self.stepped_after[id(rec)] = ids
            self._unstepped.clear()
        for gi, group in enumerate(optimizer.param_groups):
            lr = group.get("lr")
            if not isinstance(lr, (int, float)):
                continue  # a tensor lr: reading it would sync
            counts = self.lr_zero.setdefault((index, gi), [0, 0])
            counts[1] += 1
            if lr == 0 and (not require_grad or any(p.grad is not None for p in group["params"])):
                counts[0] += 1

    # ------------------------------------------------------------------ concluding
    def conclude(self, optimizers: list[torch.optim.Optimizer], *, step: int | None) -> list[Finding]:
        models = self.live_models()
        current = index_parameters(models)
        opt_of: dict[int, tuple[int, int, Any]] = {}
        for oi, opt in enumerate(optimizers):
            for gi, group in enumerate(opt.param_groups):
                for p in group["params"]:
                    opt_of.setdefault(id(p), (oi, gi, group.get("lr")))
        out: list[Finding] = []
        recreated = self._recreated(current, step)
        out += recreated
        stale = self._stale(optimizers, current, opt_of, step, {f.parameter for f in recreated})
        out += stale
        out += self._foreign(current, models, step, held=set(opt_of))
        trainable = {pid: current[pid] for model, _ in models for p in model.parameters()
                     if p.requires_grad and (pid := id(p)) in current}
        if self.params_fn is not None:
            # raw tensors an optimizer holds: parameters too (issue 11)
            # (except those of a stale optimizer: the old tensors it holds are that one finding)
            stale_opts = {f.evidence.get("optimizer") for f in stale}
            trainable.update({id(t): info for t, info in self.params_fn()
                              if info.raw and t.requires_grad and id(t) not in trainable
                              and info.optimizer not in stale_opts})
        zero = self._zero_ids()
        zero -= self._cancelled_biases(zero, trainable, models)
        unreached = [pid for pid in trainable if pid not in self.reached]
        if self.backwards and self.reach_complete:
            out += self._unreached(unreached, trainable, opt_of, bool(optimizers), step)
        out += self._zero(zero, trainable, step)
        if optimizers and not stale:
            again = {f.parameter for f in recreated}
            out += [f for f in self._not_in_optimizer(trainable, opt_of, step, models, optimizers)
                    if not set(f.evidence["parameters"]) <= again]
        out += self._lr(optimizers, step)
        return out

    def _recreated(self, current: dict[int, ParamInfo], step: int | None) -> list[Finding]:
        now = {(i.root, i.qualname): pid for pid, i in current.items()}
        out = []
        for key, pid in self.names0.items():
            if key in now and now[key] != pid:
                info = current[now[key]]
                run = self.runs.get(info.owner)
                frame = self._assignment_frame(info) or (run.frame if run else None)
                out.append(make_finding("gradient.param_recreated", Severity.ERROR, Stage.FORWARD,
                                        module=info.module, parameter=info.qualname, step=step, frame=frame))
        return out

    def _assignment_frame(self, info: ParamInfo) -> UserFrame | None:
        """The line of the owner's forward that assigns `self.<name> = ...` (read from its source)."""
        owner = next((m for model, _ in self.live_models() for m in model.modules() if id(m) == info.owner), None)
        if owner is None:
            return None
        try:
            lines, start = inspect.getsourcelines(type(owner).forward)
            file = inspect.getsourcefile(type(owner).forward)
        except (OSError, TypeError):
            return None
        code = getattr(type(owner).forward, "__code__", None)
        me = code.co_varnames[0] if code is not None and code.co_argcount else "self"
        attr = re.compile(r"\b" + re.escape(me) + r"\." + re.escape(info.qualname.rpartition(".")[2]) + r"\s*=[^=]")
        for i, text in enumerate(lines):
            if file and attr.search(text):
                return UserFrame(file, start + i, "forward", text.strip())
        return None

    def _stale(self, optimizers: list[torch.optim.Optimizer], current: dict[int, ParamInfo],
               opt_of: dict[int, tuple[int, int, Any]], step: int | None,
               recreated: set[str | None] = frozenset()) -> list[Finding]:  # type: ignore[assignment]
        models = self.live_models()
        missing = [current[id(p)].qualname for m, _ in models for p in m.parameters()
                   if p.requires_grad and id(p) not in opt_of]
        if missing and set(missing) <= recreated:
            return []  # one cause, said once: param_recreated
        out = []
        for oi, opt in enumerate(optimizers):
            held = [p for g in opt.param_groups for p in g["params"]]
            # Only parameters count: a raw tensor an optimizer holds (SAC's log_alpha, an image
            # being optimized) was never a model's, so it is no sign of a stale optimizer.
            foreign = [p for p in held if id(p) not in current and isinstance(p, nn.Parameter)]
            # Parameters of a model nobody watches are normal (a GAN's other net); stale means the
            # watched model also has trainable parameters that no optimizer holds.
            if foreign and missing:
                out.append(make_finding("gradient.optimizer_stale", Severity.ERROR, Stage.OPTIMIZER,
                                        step=step, frame=optimizer_frame(opt), optimizer=oi,
                                        optimizer_class=type(opt).__name__,
                                        held=len(held), not_in_model=len(foreign),
                                        model_params_not_in_optimizer=missing[:10],
                                        missing=len(missing)))
        return out

    def _foreign(self, current: dict[int, ParamInfo], models: list[tuple[nn.Module, str]],
                 step: int | None, held: set[int] = frozenset()) -> list[Finding]:  # type: ignore[assignment]
        # Said already, with a better location: a parameter re-created in forward is a current
        # parameter (param_recreated), a tensor in a plain attribute or list was reported statically.
        # A tensor an optimizer holds is a parameter (issue 11), never a stray leaf.
        if not self.foreign_leaves:
            return []  # (the walk over every module's attributes below is for a stray leaf only)
        known = set(current) | held
        for model, _ in models:
            known |= unregistered_leaf_ids(model)
        out = []
        by_line: dict[Any, CutRecord] = {}
        for cut in self.cuts:
            if cut.kind == "leaf_created":
                for lid in cut.leaves:
                    by_line[lid] = cut
        for lid, (shape, _) in self.foreign_leaves.items():
            if lid in known or lid in self.input_leaves or lid in held:
                continue  # a leaf an optimizer holds is optimized on purpose (an image, a raw weight)
            rec = by_line.get(lid)
            if rec is None and not self.params:
                continue
            # Re-created inside a watched model's forward: a weight that never trains (error).
            # Made outside any model and held by no optimizer: unusual, not wrong (issue 11).
            inside = rec is not None and rec.module is not None
            grows = not inside and self._grad_grows(lid)
            # A .grad that piles up while nothing reads, zeroes or applies it changes no number of the
            # run, and a constant made with requires_grad=True looks the same as a forgotten weight:
            # unusual, not harm (fixed mixture weights or scales passed to a distribution as such leaves).
            severity = Severity.ERROR if inside else Severity.INFO
            out.append(make_finding("gradient.leaf_not_registered", severity,
                                    Stage.FORWARD, variant="" if inside else ("grows" if grows else "outside"),
                                    module=rec.module if rec is not None else None,
                                    op=rec.op if rec is not None else None,
                                    frame=rec.frame if rec is not None else None, step=step, shape=shape,
                                    is_leaf=True, requires_grad=True))
        return out

    def _grad_grows(self, lid: int) -> bool:
        """The same leaf went into several backwards while its .grad stayed the same tensor and
        kept growing, and the user's code never read it (`x.grad`, seen by the op tracer on the
        steps it watches): nothing reads it into an update or zeroes it (issue 11)."""
        seen = self._leaf_grads.get(lid, [])
        if len(seen) < 2 or lid in self.grad_reads:
            return False  # (a .grad the user reads is accumulated on purpose)
        t = seen[-1][0]()
        g = t.grad if t is not None else None
        if g is None or any(r() is not t for r, _, _ in seen):
            return False
        firsts = [(gid, v) for _, gid, v in seen if gid is not None]
        return bool(firsts) and all(gid == id(g) for gid, _ in firsts) and g._version > firsts[0][1]

    def _cause(self, pid: int, info: ParamInfo, paths: dict[str, nn.Module]) -> tuple[str, Any]:
        run = self.runs.get(info.owner)
        if info.raw or (run is None and not self.modules_seen and self.forward_seen):
            # A raw tensor: no module to blame (nor, without module events, a module whose
            # call is unknown); a recorded cut on its path, else unreached.
            for kind in _CUT_KINDS:
                candidates = [rec for rec in self.cuts if rec.kind == kind and pid in rec.leaves]
                relevant = [rec for rec in candidates if pid in self.stepped_after.get(id(rec), (pid,))]
                for rec in relevant or candidates:
                    return _CUT_CODES[kind], rec
            return ("unreached_raw", info.qualname) if info.raw else ("unreached", info.module)
        if not self.forward_seen:
            return "unreached", info.module
        if run is None:
            anc = info.module
            while (par := _parent(anc)) is not None and par in paths and id(paths[par]) not in self.runs:
                anc = par
            return "unused", anc
        for kind in _CUT_KINDS:
            if kind in ("no_grad", "inference_mode") and run.grad_calls == 0:
                # The module never ran with grad: its ops' no_grad records restate the region
                # its call ran in, one per layer; the module-level cause below names that
                # call once, for every parameter of the outermost module that ran only there.
                continue
            # Prefer a cut that the parameter's own optimizer step followed: a GAN's intentional
            # D-step detach is followed by D's step, the G step's (buggy) detach by G's.
            candidates = [rec for rec in self.cuts if rec.kind == kind and pid in rec.leaves]
            relevant = [rec for rec in candidates if pid in self.stepped_after.get(id(rec), (pid,))]
            for rec in relevant or candidates:
                    return _CUT_CODES[kind], rec
        if run.grad_calls == 0:
            anc = info.module
            while ((par := _parent(anc)) is not None and par in paths
                   and (r := self.runs.get(id(paths[par]))) is not None and r.grad_calls == 0):
                anc = par
            return "cut_no_grad_module", anc
        if run.cut_inside:
            return "cut_in_module", info.module
        return "unreached", info.module

    def _unreached(self, unreached: list[int], trainable: dict[int, ParamInfo],
                   opt_of: dict[int, Any], opts_known: bool, step: int | None) -> list[Finding]:
        if not unreached:
            return []
        # Module paths per model: a teacher and a student both have "features.0" (and ""), and
        # a parameter's ancestors are looked up in its own model only.
        merged: dict[str, nn.Module] = {}
        paths_of: dict[int, dict[str, nn.Module]] = {}
        for model, _ in self.live_models():
            own = paths_of[id(model)] = dict(model.named_modules())
            for name, mod in own.items():
                merged.setdefault(name, mod)
        groups: dict[tuple[str, Any], tuple[Any, list[tuple[int, ParamInfo]]]] = {}
        inert = self._inert(unreached, trainable) if opts_known else set()
        for pid in unreached:
            if opts_known and pid not in opt_of:
                continue  # not trained on purpose: EMA / teacher / target network
            if pid in inert:
                continue  # an optimizer built over a model the run never calls, and never stepped
            if pid in self.hand:
                continue  # its .grad was set by hand and its optimizer stepped with it: it trains
            info = trainable[pid]
            code, where = self._cause(pid, info, paths_of.get(info.root, merged))
            key = (code, id(where) if isinstance(where, CutRecord) else (info.root, where))
            groups.setdefault(key, (where, []))[1].append((pid, info))
        out = []
        none = set(unreached)
        for (code, _), (where, members) in groups.items():
            paths = paths_of.get(members[0][1].root, merged)
            infos = [i for _, i in members]
            names = [i.qualname for i in infos]
            first = infos[0]
            common = dict(parameters=names[:10], count=len(names), grad=None, requires_grad=True,
                          in_optimizer=any(pid in opt_of for pid, _ in members), **self._model_of(first))
            if code in ("unused", "unreached", "unreached_raw") and opts_known:
                # harm evidence (`_harm.py`): does the optimizer holding them train anything else?
                opts = {opt_of[pid][0] for pid, _ in members if pid in opt_of}
                common["optimizer_trains_nothing_else"] = bool(opts) and not any(
                    o[0] in opts and pid not in none for pid, o in opt_of.items() if pid in trainable)
            if isinstance(where, CutRecord):
                rec = where
                owners = sorted({i.module for i in infos if i.module is not None})
                variant = "inference_mode" if rec.kind == "inference_mode" else ""
                extra = {"mode": _MODES[variant]} if code == "cut_no_grad" else {}
                out.append(make_finding(f"gradient.{code}", Severity.ERROR, Stage.FORWARD,
                                        module=(rec.module if rec.module is not None
                                                else (owners[0] if owners else None)),
                                        parameter=first.qualname, op=rec.op, frame=rec.frame, step=step,
                                        variant=variant, wording="" if owners or rec.module else "raw",
                                        affected=owners[:10], **extra, **common))
            elif code == "cut_no_grad_module":
                run = self.runs.get(id(paths[where])) if where in paths else None
                variant = "inference_mode" if run is not None and run.inference else ""
                out.append(make_finding("gradient.cut_no_grad", Severity.ERROR, Stage.FORWARD, module=where,
                                        parameter=first.qualname, op=_MODES[variant].rstrip("()"),
                                        frame=run.nograd_frame if run else None, step=step, variant=variant,
                                        mode=_MODES[variant], affected=[where], **common))
            elif code == "unreached_raw":
                out.append(make_finding("gradient.unreached", Severity.WARNING, Stage.BACKWARD,
                                        parameter=first.qualname, step=step, variant="raw", **common))
            elif code == "unused":
                out.append(make_finding("gradient.unused", Severity.WARNING, Stage.FORWARD, module=where,
                                        parameter=first.qualname, step=step, **common))
            elif code == "cut_in_module":
                run = self.runs[first.owner]
                out.append(make_finding("gradient.cut_in_module", Severity.ERROR, Stage.FORWARD,
                                        module=first.module, parameter=first.qualname, frame=run.cut_frame,
                                        step=step, **common))
            else:
                run = self.runs.get(first.owner)
                out.append(make_finding("gradient.unreached", Severity.WARNING, Stage.BACKWARD,
                                        module=first.module, parameter=first.qualname,
                                        frame=run.frame if run else None, step=step,
                                        variant="" if self.forward_seen else "no_forward", **common))
        return out

    def _inert(self, unreached: list[int], trainable: dict[int, ParamInfo]) -> set[int]:
        """Raw tensors (of no watched model: its module never ran) whose every optimizer never
        stepped: a model and optimizer built only to write a first checkpoint, or replaced before
        training. Nothing of this run depended on them."""
        if self.params_fn is None:
            return set()
        holders: dict[int, set[int]] = {}
        for t, info in self.params_fn():
            if info.raw and info.optimizer is not None:
                holders.setdefault(id(t), set()).add(info.optimizer)
        return {pid for pid in unreached if trainable[pid].raw and pid in holders
                and not holders[pid] & self.stepped_opts}

    def _model_of(self, info: ParamInfo) -> dict[str, Any]:
        """{"model": label} when several models are watched (G, netD: issue 11), else {}."""
        if info.label is None or len(self.models) < 2:
            return {}
        return {"model": info.label}

    def _zero_ids(self) -> set[int]:
        self.flags.resolve()  # what the step reads did not carry: one read
        seen: dict[int, bool] = {}
        for ids, norms in self.norms:
            for pid, v in zip(ids, norms):
                seen[pid] = seen.get(pid, False) or v != 0
        self._nonzero = {pid for pid, nonzero in seen.items() if nonzero}
        return {pid for pid, nonzero in seen.items() if not nonzero}

    def _cancelled_biases(self, zero: set[int], trainable: dict[int, ParamInfo],
                          models: list[tuple[nn.Module, str]]) -> set[int]:
        """Zero-grad biases whose module's weight did get a gradient. A bias's gradient is a sum
        over the batch; sign-valued losses (L1, hinge) make it cancel exactly whenever the
        residuals balance, on correct code. A structural zero (a gate of 0, dead units) zeroes
        the weight's gradient too, so it is still reported there."""
        if not zero:
            return set()
        nonzero_owners = {trainable[pid].owner for pid in self._nonzero if pid in trainable}
        out = set()
        for model, _ in models:
            for p in model.parameters():
                pid = id(p)
                if pid in zero and pid in trainable and p.dim() == 1 and trainable[pid].owner in nonzero_owners:
                    out.add(pid)
        return out

    def _zero(self, zero: set[int], trainable: dict[int, ParamInfo], step: int | None) -> list[Finding]:
        groups: dict[Any, list[ParamInfo]] = {}
        for pid in zero:
            if pid in trainable:
                info = trainable[pid]
                groups.setdefault(info.owner or ("raw", pid), []).append(info)
        out: list[Finding] = []
        if not groups:
            return out
        # Report path only (some gradient is exactly zero): one read of every module's flag.
        flags = {oid: r.positive for oid, r in self.runs.items() if r.positive is not None}
        alive = {oid: bool(v) for oid, v in zip(flags, read_scalars(list(flags.values())))}
        for owner, infos in groups.items():
            dead = owner in alive and not alive[owner]
            run = self.runs.get(owner) if isinstance(owner, int) else None
            out.append(make_finding("gradient.zero", Severity.WARNING, Stage.BACKWARD, module=infos[0].module,
                                    parameter=infos[0].qualname, frame=run.frame if run else None, step=step,
                                    variant="dead_relu" if dead else "", **self._model_of(infos[0]),
                                    parameters=[i.qualname for i in infos],
                                    grad_max_abs=0.0, output_ever_positive=alive.get(owner)))
        return out

    def _not_in_optimizer(self, trainable: dict[int, ParamInfo], opt_of: dict[int, Any],
                          step: int | None, models: list[tuple[nn.Module, str]],
                          optimizers: list[torch.optim.Optimizer] = ()) -> list[Finding]:  # type: ignore[assignment]
        # With one optimizer, the line to change is the one that built it (known under `run`).
        frame = optimizer_frame(optimizers[0]) if len(optimizers) == 1 else None
        groups: dict[tuple[bool, str | None], list[str]] = {}
        for model, _ in models:
            # A whole model of which no optimizer holds any parameter, called in eval() only, is a
            # frozen feature extractor whose requires_grad was left on (a pretrained encoder): its
            # gradients are wasted work, not a layer the optimizer forgot (info).
            frozen = self._eval_only_unoptimized(model, opt_of)
            for p in model.parameters():
                pid = id(p)
                if pid not in trainable or pid in opt_of or pid not in self.versions:
                    continue
                if p._version != self.versions[pid]:
                    continue  # something else updates it (an optimizer we do not watch)
                info = trainable[pid]
                groups.setdefault((frozen, info.module), []).append(info.qualname)
        out = []
        for (frozen, mod), names in groups.items():
            extra: dict[str, Any] = {"whole_model_in_eval": True} if frozen else {}
            out.append(make_finding("gradient.not_in_optimizer", Severity.INFO if frozen else Severity.ERROR,
                                    Stage.OPTIMIZER, module=mod, parameter=names[0], step=step, frame=frame,
                                    parameters=names[:10], count=len(names), grad="present", updated=False, **extra))
        return out

    def _eval_only_unoptimized(self, model: nn.Module, opt_of: dict[int, Any]) -> bool:
        """No optimizer holds any of `model`'s parameters and it ran with grad in eval() only."""
        run = self.runs.get(id(model))
        if run is None or not run.grad_calls or run.train_calls:
            return False
        return not any(id(p) in opt_of for p in model.parameters())

    def _lr(self, optimizers: list[torch.optim.Optimizer], step: int | None) -> list[Finding]:
        out = []
        for (oi, gi), (zero, steps) in self.lr_zero.items():
            if steps and zero == steps:
                opt = optimizers[oi] if oi < len(optimizers) else None
                # the line to change is the one that built the optimizer (known under `run`)
                out.append(make_finding("gradient.lr_zero", Severity.WARNING, Stage.OPTIMIZER, step=step,
                                        op=type(opt).__name__ if opt is not None else None,
                                        frame=optimizer_frame(opt) if opt is not None else None,
                                        optimizer=oi, group=gi, lr=0.0, steps=steps))
        return out


def _first_tensor(output: Any) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (list, tuple)):
        for o in output:
            if isinstance(o, torch.Tensor):
                return o
    if isinstance(output, dict):
        for o in output.values():
            if isinstance(o, torch.Tensor):
                return o
    return None


def add_model(analysis: Analysis, model: nn.Module, label: str) -> None:
    """Watch one more model in an open window (a model discovered after the first step)."""
    if any(r() is model for r, _ in analysis.models):
        return
    analysis.models.append((weakref.ref(model), label))
    for pid, info in index_parameters([(model, label)]).items():
        analysis.params.setdefault(pid, info)
        analysis.names0.setdefault((info.root, info.qualname), pid)


def _max_abs(minmax: list[float]) -> list[float]:
    """Each gradient's max-abs from their mins then their maxes; NaN when either is NaN."""
    out = []
    half = len(minmax) // 2
    for lo, hi in zip(minmax[:half], minmax[half:]):
        out.append(math.nan if lo != lo or hi != hi else max(-lo, hi))
    return out
