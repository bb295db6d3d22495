"""Parameters that should move and did not (issue 26, parameter updates).

A parameter should move when it requires grad, an optimizer that stepped holds it and its
gradient is non-zero. Whether it did is read from its values: a sample of at most `SAMPLE`
elements (evenly spaced over the flattened tensor) is kept when the parameter is first seen with
a gradient, and at each of the first `LOOKS` judged steps of the optimizer holding it the
sampled positions whose gradient (as that optimizer reads it) is non-zero are noted (a
zero-initialised branch, LoRA's `B`, a ReZero gate: their gradient is zero until what they
depend on has moved, so they are judged only from then on). A gradient below `NOISE` of its
model's usual scale is float noise around an exact zero (a bias before a BatchNorm).
At the end each noted position is compared with its first value:

  * weights stored in bfloat16 / float16, with most noted positions unchanged: the optimizer's
    updates are smaller than the spacing of the weights' dtype and round back (a model cast with
    `.to(torch.bfloat16)` and trained with lr 1e-4);
  * any other dtype, with every noted position unchanged: the optimizer stepped but these
    values never changed (it updates another tensor, or something restores them).

A group whose learning rate is 0 is left to `gradient.lr_zero`; a parameter no optimizer holds,
or held by one that never stepped, to the gradient check (`not_in_optimizer`, `optimizer_idle`).
Cost: per parameter, two gathers and a maximum at each of the first `LOOKS` judged steps;
one compare and one read at the end. No device read before the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from typing import Any

import torch

from .._deferred import read_scalars
from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack
from .._params import ParamInfo

SAMPLE = 32
LOOKS = 8  # judged steps (or backwards) whose gradients are sampled, per parameter
MIN_STEPS = 3  # judged steps of the holding optimizer before its parameters are judged
MIN_BACKWARDS = 8  # judged backwards before an optimizer that never stepped is judged
MIN_VALUES = 4  # sampled positions with a gradient, per finding of a stepped optimizer
MIN_GRADLESS = 5  # judged steps in a row, to the end, of an optimizer none of whose tensors has a gradient
LOW = (torch.bfloat16, torch.float16)
LOW_SHARE = 0.5  # low-precision weights: this share of the noted positions unchanged
NOISE = 1e-3  # a gradient below this share of its model's scale is float noise around an exact 0


@dataclasses.dataclass
class _Track:
    """One parameter's sample; kept by the watch (a parameter freed before the end is still judged)."""

    ref: weakref.ref[torch.Tensor]
    dtype: torch.dtype
    index: torch.Tensor
    start: torch.Tensor
    gmax: torch.Tensor  # the largest |gradient| seen at each sampled position
    moved: torch.Tensor  # a position's value differed from its start at a judged step's end
    info: ParamInfo
    opt: int | None  # id of the optimizer holding it
    opt_name: str
    lr: Any
    looks: int = 0
    # a position's value differed from its start when a later step began (None: not looked yet):
    # a run that restores its weights once (rewinding, the best checkpoint reloaded at the end)
    # moved them in between; one that restores them after every step never did
    drift: torch.Tensor | None = None
    holder: Any = None  # a weak reference to the optimizer holding it
    # its optimizer stepped, in a judged step or not (one built per client or task whose steps fell between
    # the judged ones, while its parameters' gradients were noted in judged backwards, did step)
    stepped: bool = False


def _sample(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).index_select(0, index)


def _dtensor(t: torch.Tensor) -> bool:
    return isinstance(getattr(t, "_local_tensor", None), torch.Tensor)


class UpdateWatch:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.tracked: dict[int, _Track] = {}
        self.steps: dict[int, int] = {}  # id(optimizer) -> judged steps
        self.frames: dict[int, UserFrame | None] = {}  # id(optimizer) -> the line of its first step
        self.looks: dict[int, int] = {}  # id(optimizer) -> judged steps whose gradients were sampled
        self.backwards = 0  # judged backwards
        self.frame: UserFrame | None = None  # the line of the first judged backward
        # id(optimizer) -> {id: shape} of its tensors without a .grad at every look
        self.gradless: dict[int, dict[int, tuple[int, ...]]] = {}
        self.held: dict[int, int] = {}  # id(optimizer) -> how many tensors requiring grad it holds
        self.names: dict[int, str] = {}  # id(optimizer) -> its class name
        # id(optimizer) -> [judged steps in a row without any gradient, since, a held tensor, class, count]
        self.streaks: dict[int, list[Any]] = {}
        self.backwards_since: dict[int, int] = {}  # id(optimizer) -> judged backwards during its streak

    # ------------------------------------------------------------------ events
    def _note(self, p: Any, info: ParamInfo | None, opt: torch.optim.Optimizer | None) -> None:
        if info is None or not isinstance(p, torch.Tensor) or not p.requires_grad or p.grad is None \
                or not p.is_floating_point() or not p.numel() or _dtensor(p) \
                or p.grad.layout is not torch.strided or p.grad.shape != p.shape:
            return
        t = self.tracked.get(id(p))
        fresh = t is None or t.ref() is not p or t.dtype != p.dtype
        if not fresh and t is not None and t.looks >= LOOKS:
            return
        if fresh:
            n = p.numel()
            index = torch.linspace(0, n - 1, min(n, SAMPLE), device=p.device).long()
            zeros = torch.zeros(index.numel(), dtype=torch.float32, device=p.device)
            lr = opt.param_groups[info.group or 0].get("lr") if opt is not None else None
            t = _Track(weakref.ref(p), p.dtype, index, _sample(p, index).clone(), zeros, zeros.bool(), info,
                       id(opt) if opt is not None else None, type(opt).__name__ if opt is not None else "", lr)
            if opt is not None:
                with contextlib.suppress(TypeError):
                    t.holder = weakref.ref(opt)
                t.stepped = _stepped(self.session, opt)
            else:
                t.stepped = False
            self.tracked[id(p)] = t
        assert t is not None
        if not fresh:
            differ = _sample(p, t.index) != t.start
            t.drift = differ if t.drift is None else t.drift | differ
        torch.maximum(t.gmax, _sample(p.grad, t.index).abs().float(), out=t.gmax)
        t.looks += 1

    def step_pre(self, opt: torch.optim.Optimizer) -> None:
        """`opt` is about to step: the gradients it will apply, at its first `LOOKS` judged steps."""
        self.streak(opt)
        seen = self.looks.get(id(opt), 0)
        if seen >= LOOKS:
            return
        self.looks[id(opt)] = seen + 1
        self.names[id(opt)] = type(opt).__name__
        index = self.session.param_index
        trainable = [p for g in opt.param_groups for p in g["params"]
                     if isinstance(p, torch.Tensor) and p.requires_grad]
        none = {id(p): tuple(p.shape) for p in trainable if p.grad is None}
        self.held[id(opt)] = len(trainable)
        self.gradless[id(opt)] = none if not seen else {
            k: v for k, v in self.gradless.get(id(opt), {}).items() if k in none}
        with torch.no_grad():
            for group in opt.param_groups:
                for p in group["params"]:
                    if isinstance(p, torch.Tensor) and p.grad is not None:
                        self._note(p, index.info(p), opt)

    def backward_end(self) -> None:
        """A judged backward: parameters that no optimizer holds, or whose optimizer has not stepped
        yet, are sampled here."""
        self.backwards += 1
        for oid, entry in self.streaks.items():
            self.backwards_since[oid] = self.backwards_since.get(oid, 0) + 1 if entry[0] else 0
        if self.frame is None:
            self.frame = user_frame_from_stack(3)
        sess = self.session
        optimizers = sess.optimizers
        with torch.no_grad():
            for p, info in sess.param_index.tensors():
                if p.grad is None:
                    continue
                opt = optimizers[info.optimizer] if info.optimizer is not None \
                    and info.optimizer < len(optimizers) else None
                if opt is None or not self.steps.get(id(opt)):
                    self._note(p, info, opt)

    def stepped(self, opt: torch.optim.Optimizer) -> None:
        self.steps[id(opt)] = self.steps.get(id(opt), 0) + 1
        if id(opt) not in self.frames:
            self.frames[id(opt)] = user_frame_from_stack(3)

    def step_end(self, final: bool = False) -> None:
        """A judged step ended: which sampled positions differ from their start (no read). At the
        end, a live parameter is judged by its values then (a value restored after each step did
        not move); a freed one by what the judged steps saw."""
        with torch.no_grad():
            for t in self.tracked.values():
                if not t.stepped and t.holder is not None:
                    t.stepped = _stepped(self.session, t.holder())
                p = t.ref()
                if p is not None and p.dtype == t.dtype:
                    differ = _sample(p, t.index) != t.start
                    if final:
                        t.moved = differ if t.drift is None else differ | t.drift
                    else:
                        t.moved = t.moved | differ

    # ------------------------------------------------------------------ judging
    def end(self) -> list[Finding]:
        out = self._gradless_findings()
        if not self.tracked:
            return out
        self.step_end(final=True)
        # a parameter freed before the end (its model was dropped) left nothing the run keeps
        rows = [(t, kind) for t in self.tracked.values()
                if t.ref() is not None and (kind := self._kind(t)) is not None]
        if not rows:
            return out
        with torch.no_grad():
            # a gradient counts only above a share of its model's usual scale (the median over its
            # parameters of the largest sampled |gradient|): a bias before a BatchNorm, a critic's
            # last bias under mean(fake) - mean(real) get float noise where the exact gradient is 0.
            # All on the device, read once.
            dev = rows[0][0].gmax.device
            peaks = torch.stack([_on(t.gmax.max().float(), dev) for t, _ in rows])
            roots = [t.info.root for t, _ in rows]
            scale = torch.empty_like(peaks)
            for root in set(roots):
                idx = [i for i, r in enumerate(roots) if r == root]
                scale[idx] = peaks[idx].sort().values[len(idx) // 2]
            counts_t = []
            for i, (t, _) in enumerate(rows):
                moving = t.gmax > NOISE * _on(scale[i], t.gmax.device)
                unchanged = ~t.moved & moving
                typical = t.start.abs().float().median()
                counts_t.append(_on(torch.stack([moving.sum().float(), unchanged.sum().float(), typical]), dev))
            flat = read_scalars([torch.stack(counts_t).reshape(-1)])  # the one read, at the end
            counts = [flat[k:k + 3] for k in range(0, len(flat), 3)]
        groups: dict[tuple[int, int, str], list[tuple[_Track, int, int, float]]] = {}
        for (t, kind), (noted, same, w) in zip(rows, counts):
            if not noted:
                continue
            if kind == "held":
                kind = "low" if t.dtype in LOW else "still"
            if (kind == "low" and same >= LOW_SHARE * noted) or (kind != "low" and same == noted):
                groups.setdefault((t.info.root, t.opt or 0, kind), []).append((t, int(noted), int(same), w))
        # a lone scalar (a critic's output bias held at a weight clip's bound) is too little to judge
        return out + [self._finding(items, kind) for (_, _, kind), items in groups.items()
                      if kind in ("never", "copy") or sum(it[1] for it in items) >= MIN_VALUES]

    def streak(self, opt: torch.optim.Optimizer) -> None:
        """At every judged step of `opt`: does any tensor it holds have a gradient?"""
        held = [p for g in opt.param_groups for p in g["params"] if isinstance(p, torch.Tensor) and p.requires_grad]
        if not held:
            return
        entry = self.streaks.setdefault(id(opt), [0, None, weakref.ref(held[0]), type(opt).__name__, len(held)])
        if any(p.grad is not None for p in held):
            entry[0], entry[1] = 0, None
        else:
            if entry[0] == 0:
                entry[1] = self.session.step
            entry[0] += 1
            entry[2] = weakref.ref(held[0])

    def _gradless_findings(self) -> list[Finding]:
        """An optimizer that stepped, at every judged step from one on to the end, with no gradient on
        any tensor it holds while backward passes ran: it steps a copy of what the forward uses."""
        out = []
        for oid, (count, since, ref, name, n) in self.streaks.items():
            if count < MIN_GRADLESS or self.backwards_since.get(oid, 0) < MIN_GRADLESS:
                continue
            first = ref()
            info = self.session.param_index.info(first) if first is not None else None
            model = info.label if info is not None and info.label else "its model"
            frame = self.frames.get(oid)
            fields = {"opt": name, "steps": count, "since": since, "count": n, "model": model}
            evidence = {"optimizer": name, "judged_steps_without_gradient": count, "since_step": since,
                        "tensors_held": n, "grad": "None on every tensor it holds",
                        "judged_backwards_meanwhile": self.backwards_since.get(oid, 0)}
            out.append(from_catalogue(Category.GRADIENT, "gradient.not_moved", "ledger.not_moved.gradless",
                                      fields=fields, cause_key="ledger.not_moved.gradless.cause",
                                      next_key="ledger.not_moved.gradless.next", frame=frame, evidence=evidence,
                                      source_line=frame is not None, severity=Severity.WARNING,
                                      stage=Stage.OPTIMIZER, step=since))
        return out

    def _kind(self, t: _Track) -> str | None:
        """How a parameter is judged: held by an optimizer that stepped ("held"), by one that never
        stepped in a run of judged backwards ("never"), or by none while an optimizer steps tensors
        that never get a gradient ("copy"); None: not judged."""
        if t.opt is not None:
            steps = self.steps.get(t.opt, 0)
            if steps == 0 and self.backwards >= MIN_BACKWARDS:
                return "never" if not t.stepped else None
            if steps < MIN_STEPS or (isinstance(t.lr, (int, float)) and t.lr == 0):
                return None
            return "held"
        if t.info.label and self._copy(t) is not None:
            return "copy"
        return None

    def _copy(self, t: _Track) -> int | None:
        """An optimizer that stepped holding tensors that had no gradient at any of its looks, most
        of what it holds (a stale model: the parameters before they were replaced) or one shaped
        like `t`'s parameter (the copy of it that was stepped instead). An optimizer whose model
        has an unused layer (a boosting stage's first learner, whose input norm never runs) steps a
        few tensors without a gradient too; they are no copy of the parameters of a later stage
        that no optimizer holds any more."""
        p = t.ref()
        shape = tuple(p.shape) if p is not None else None
        for oid, none in self.gradless.items():
            if (none and self.steps.get(oid, 0) >= MIN_STEPS
                    and (2 * len(none) >= self.held.get(oid, 0) or shape in none.values())):
                return oid
        return None

    def _finding(self, items: list[tuple[_Track, int, int, float]], variant: str) -> Finding:
        sess = self.session
        t, _, _, w = items[0]
        info = t.info
        oid = t.opt if variant != "copy" else self._copy(t)
        opt_name = t.opt_name if variant != "copy" else self.names.get(oid or 0, "optimizer")
        lr = t.lr
        names = [it[0].info.qualname for it in items]
        noted = sum(it[1] for it in items)
        same = sum(it[2] for it in items)
        share = f"{100 * same / max(noted, 1):.0f}%"
        steps = self.steps.get(oid or 0, 0)
        model = info.label or "the model"
        spacing = torch.finfo(t.dtype).eps * w
        evidence: dict[str, Any] = {
            "parameters": names[:8], "count": len(items), "dtype": str(t.dtype).replace("torch.", ""),
            "optimizer": opt_name, "lr": lr, "judged_steps": steps,
            "sampled_values_with_gradient": noted, "unchanged": same, "unchanged_share": share,
            "median_abs_weight": round(w, 6), "dtype_spacing_there": float(f"{spacing:.3g}")}
        if info.label:
            evidence["model"] = info.label
        fields: dict[str, Any] = {"count": len(items), "model": model, "first": names[0], "opt": opt_name,
                                  "steps": steps, "share": share, "dtype": evidence["dtype"], "lr": lr,
                                  "w": f"{w:.3g}", "spacing": f"{spacing:.2g}"}
        low = variant == "low"
        frame = self.frames.get(oid or 0) or self.frame
        if variant in ("copy", "never"):
            evidence["judged_backwards"] = fields["backwards"] = self.backwards
        if variant == "copy":
            evidence["gradless_tensors_it_steps"] = fields["twins"] = len(self.gradless.get(oid or 0, ()))
            del evidence["lr"]
        if variant == "never":
            evidence["optimizer_steps"] = 0
        return from_catalogue(Category.DTYPE if low else Category.GRADIENT,
                              "dtype.updates_rounded_away" if low else "gradient.not_moved",
                              f"ledger.not_moved.{variant}", fields=fields,
                              cause_key=f"ledger.not_moved.{variant}.cause",
                              next_key=f"ledger.not_moved.{variant}.next",
                              frame=frame, evidence=evidence, source_line=frame is not None,
                              severity=Severity.WARNING, stage=Stage.OPTIMIZER, step=sess.step,
                              module=info.module, parameter=names[0])


def _stepped(session: Any, opt: Any) -> bool:
    """`opt` stepped at least once, in any step (the session sees every optimizer step, also those of the
    steps this check sits out)."""
    once = getattr(session, "_stepped_once", None)
    return opt is not None and once is not None and opt in once


def _on(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`x` on `device`, with no copy (and no call at all) when it is there already."""
    return x if x.device == device else x.to(device)
