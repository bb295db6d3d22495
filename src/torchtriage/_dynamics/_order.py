"""The order of a step's calls: gradient clipping and accumulation.

`clip_grad_norm_` is observed by wrapping `torch.nn.utils.clip_grad_norm_` (and its home
module's name) for the session; a name imported before the session started
(`from torch.nn.utils import clip_grad_norm_` at the top of a module run under `watch`) is not
seen. Under `torchtriage run` the script is imported inside the session, so it is.

  * clip before backward / after step: at `optimizer.step()`, a backward ran after the step's
    last clip, so the gradients applied were never clipped (reported from the second such step).
    A clip after the step measures the very gradients that step applied (no backward ran in
    between): the norm it returns rides the deferred read (session 18). Decided at the run's end:
    a warning with the measured harm when, on most of the clips whose norm was read (a norm of 0,
    gradients zeroed before the clip, measures nothing), the norm was above `max_norm` (the steps
    applied gradients the clip would have scaled down); an info when it seldom was (the clip had
    nothing to cut); held to the loss like every trend finding when fewer than 2 were read;
  * an accumulated loss not divided (never for a closure-driven optimizer such as LBFGS, whose
    step() evaluates the closure several times): >= 2 backward calls per optimizer step, each after its own
    forward of a watched model, all from the same line (a micro-batch loop; two different losses
    on two lines, like a DCGAN discriminator's real and fake terms, are a sum on purpose), and
    no root is scaled (its autograd node is not a Div/Mul by a constant, nor a sum). A root that is
    a Div/Mul has its factor measured (session 16): hooks on the deepest Div/Mul of the chain below the
    root and on the root keep the gradient the chain hands the loss and the root's own, read on the
    deferred read; a factor of exactly 1 on every micro-batch (`loss / gradient_accumulation_steps`
    where that setting is 1: a framework that divides by its own accumulation count, told 1) is no
    scaling.

Both show on every step they occur in, and each call site costs a stack walk: they are watched
on the steps of `_cadence.sampled` only (`tracking`, set for the next step at each step's end);
`clip_seen` (evidence of other findings) is kept on every step.
"""

from __future__ import annotations

import functools
import statistics
import sys
import warnings
from typing import Any

import torch
import torch.nn.utils as nn_utils
from torch.nn.utils import clip_grad as _clip_grad

from .._catalogue import msg
from .._errors import TriageInternalWarning
from .._findings import Category, Finding, Severity, Stage
from .._frames import UserFrame, user_frame_from_stack, user_stack_frame, user_stacklevel
from ._clipmiss import ClipTargets
from ._common import finding, num
from ._partial import PartialClips

ADAPTIVE = ("Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta", "SparseAdam", "Adafactor")
_SCALED = ("DivBackward", "MulBackward", "SumBackward")
MAX_CHAIN = 8  # scaling nodes followed below a root
MAX_NORMS = 4096  # norms of clips after a step kept


class StepOrder:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.broken = False
        self.backwards: list[tuple[bool, str, tuple[Any, ...]]] = []  # (after own forward, node, call site)
        self.frame: UserFrame | None = None  # the user's line of the step's backward calls (from the second)
        self.forward_since_backward = False
        # (backwards then, after step, max_norm, frame)
        self.clip: tuple[int, bool, float | None, UserFrame | None] | None = None
        self.clip_seen = False
        self.bad_clip: dict[str, int] = {}
        self.accum_hits = 0
        self.in_step = False
        self.closure = False  # a closure-driven optimizer (LBFGS) runs forward + backward inside step()
        self.reported: set[str] = set()
        self.tracking = True  # this step is watched (`_cadence.sampled`)
        self.partial = PartialClips()  # clips between two backward calls of one step (`_partial`)
        self.targets = ClipTargets(session)  # clips that miss the stepped optimizer's parameters (`_clipmiss`)
        self.defer: Any = None  # the dynamics check's deferred read (`DeferredFlags.add`)
        self.config: Any = None  # clipping the configuration turned off (`_clipcfg.ClipConfig`), every call
        self.factors: list[Any] = []  # per Div/Mul root of this step: [the factor it applied] (set by its hook)
        self.pending: list[Finding] = []  # findings decided on a deferred read, handed out at the next step
        self.after_step: Finding | None = None  # `clip_after_step`, decided at the end by the norms below
        self.after_norms: list[tuple[float, float]] = []  # (norm, max_norm) of clips after a step, read

    def track(self, on: bool) -> None:
        """Whether the next step is watched; a step left out leaves nothing behind."""
        if on and not self.tracking:
            self.backwards, self.clip, self.frame = [], None, None
            self.forward_since_backward = False
            self.partial.reset()
            self.targets.backward()
        self.tracking = on

    def install(self) -> None:
        original = _clip_grad.clip_grad_norm_
        wrapped = self._wrap(original)
        self.session.patch(_clip_grad, "clip_grad_norm_", wrapped)
        if getattr(nn_utils, "clip_grad_norm_", None) is original:
            self.session.patch(nn_utils, "clip_grad_norm_", wrapped)

    def _wrap(self, original: Any) -> Any:
        order = self

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:  # (named like the other pass-through wrappers)
            __tracebackhide__ = True
            params: list[Any] | None = None
            max_norm: Any = None
            if not order.broken:
                try:
                    if order.tracking:
                        args, kwargs, params = _parameters(args, kwargs)
                    max_norm = args[1] if len(args) > 1 else kwargs.get("max_norm")
                    max_norm = float(max_norm) if isinstance(max_norm, (int, float)) else None
                    order.clipped(max_norm)
                except Exception as e:
                    order.broken = True
                    warnings.warn(msg("internal.warning", where="dynamics.clip", error=f"{type(e).__name__}: {e}"),
                                  TriageInternalWarning, stacklevel=user_stacklevel())
            out = original(*args, **kwargs)
            clip = order.clip
            if (not order.broken and clip is not None and clip[1] and clip[2] and order.defer is not None
                    and isinstance(out, torch.Tensor) and len(order.after_norms) < MAX_NORMS):
                order.defer([out.detach()], functools.partial(order.after_norm, clip[2]))
            if order.config is not None and not order.broken:
                try:
                    order.config.clipped(max_norm, out, sys._getframe(1))
                except Exception as e:
                    order.broken = True
                    warnings.warn(msg("internal.warning", where="dynamics.clip", error=f"{type(e).__name__}: {e}"),
                                  TriageInternalWarning, stacklevel=user_stacklevel())
            if params is not None and not order.broken and order.clip is not None:
                try:
                    order.partial.clipped(order.clip[0], params, out, max_norm, order.clip[3])
                    order.targets.clipped(params, max_norm, order.clip[3])
                except Exception as e:
                    order.broken = True
                    warnings.warn(msg("internal.warning", where="dynamics.clip", error=f"{type(e).__name__}: {e}"),
                                  TriageInternalWarning, stacklevel=user_stacklevel())
            return out

        return wrapped

    # ------------------------------------------------------------------ events
    def clipped(self, max_norm: float | None) -> None:
        self.clip_seen = True
        if not self.tracking:
            return
        after_step = not self.backwards and self.session.stage is Stage.PARAMETER
        self.partial.before_clip()
        self.clip = (len(self.backwards), after_step, max_norm, user_frame_from_stack(3))

    def after_norm(self, max_norm: float, v: list[float]) -> None:
        """The norm a clip after the step returned (read): that of the gradients the step applied."""
        if v and v[0] > 0 and v[0] == v[0] and len(self.after_norms) < MAX_NORMS:
            self.after_norms.append((v[0], max_norm))

    def root_forward(self) -> None:
        self.forward_since_backward = True

    def backward(self, roots: tuple[Any, ...]) -> None:
        root = roots[0] if roots and isinstance(roots[0], torch.Tensor) else None
        node = type(root.grad_fn).__name__ if root is not None and root.grad_fn is not None else ""
        scalar = root is not None and root.numel() == 1
        # The call site as a cheap key; the user's line (with its source text) is built only from
        # a step's second backward on, when accumulation is possible.
        if self.in_step:
            self.closure = True  # several evaluations per step are the optimizer's, not accumulation
        site = _site(4)
        self.partial.backward()
        self.targets.backward()
        if self.backwards and scalar and self.frame is None:
            self.frame = user_frame_from_stack(4)
        if scalar and node.startswith(_SCALED[:2]) and root is not None and root.grad_fn is not None:
            self.factors.append(_factor(root.grad_fn))
        self.backwards.append((self.forward_since_backward and scalar, node, site))
        self.forward_since_backward = False

    def optimizer_step(self, opt: torch.optim.Optimizer) -> list[Finding]:
        out: list[Finding] = []
        step = self.session.step
        if self.clip is not None:
            at, after_step, max_norm, frame = self.clip
            if len(self.backwards) > at:
                kind = "clip_after_step" if after_step else "clip_before_backward"
                self.bad_clip[kind] = self.bad_clip.get(kind, 0) + 1
                if self.bad_clip[kind] == 2 and kind not in self.reported:
                    self.reported.add(kind)
                    misplaced = finding(kind, category=Category.GRADIENT, stage=Stage.BACKWARD, step=step,
                                        frame=frame, op="clip_grad_norm_", cause="dynamics.clip_order.cause",
                                        next_key="dynamics.clip_order.next",
                                        evidence={"max_norm": max_norm,
                                                  "backward_calls_after_clip": len(self.backwards) - at,
                                                  "steps_seen_like_this": 2})
                    if kind == "clip_after_step":
                        self.after_step = misplaced  # judged at the end by the norms the clips returned (`flush`)
                    else:
                        out.append(misplaced)
        if self.defer is not None and not self.closure:
            self.partial.step(step, len(self.backwards), self.defer)
        if not self.closure:
            self.targets.stepped(opt, step, self.defer)
        bw = self.backwards
        out, self.pending = self.pending + out, []
        if (not self.closure and len(bw) >= 2 and all(own for own, _, _ in bw) and len({site for _, _, site in bw}) == 1
                and self.frame is not None and not any(node.startswith(("SumBackward",)) for _, node, _ in bw)):
            scaled = [node for _, node, _ in bw if node.startswith(_SCALED)]
            hit = functools.partial(self._hit, step, self.frame, len(bw), bw[0][1], type(opt).__name__)
            if not scaled:
                f = hit()
                if f is not None:
                    out.append(f)
            elif len(scaled) == len(bw) and len(self.factors) == len(bw) \
                    and all(t is not None for box in self.factors for t in box) \
                    and self.defer is not None and "accum" not in self.reported:
                def measured(v: list[float], hit: Any = hit) -> None:
                    ratios = [g / go for g, go in zip(v[::2], v[1::2]) if go]
                    if len(ratios) * 2 == len(v) and all(abs(x - 1.0) <= 1e-6 for x in ratios):
                        f = hit(factor=ratios[0])  # divided (or multiplied) by exactly 1
                        if f is not None:
                            self.pending.append(f)
                self.defer([t.reshape(()).float() for box in self.factors for t in box], measured)
        self.factors = []
        self.backwards = []
        self.clip = None
        self.frame = None
        return out


    def _hit(self, step: int, frame: UserFrame, count: int, node: str, kind: str,
             factor: float | None = None) -> Finding | None:
        """A step whose micro-batch losses were summed unscaled; the second such step is reported."""
        self.accum_hits += 1
        if self.accum_hits != 2 or "accum" in self.reported:
            return None
        self.reported.add("accum")
        adaptive = kind in ADAPTIVE
        evidence: dict[str, Any] = {"backward_calls_per_step": count, "loss_node": node, "optimizer": kind}
        if factor is not None:
            evidence["loss_scaled_by"] = factor  # a Div / Mul whose factor is 1
        return finding("accumulation_not_divided", category=Category.GRADIENT, stage=Stage.BACKWARD,
                       severity=Severity.INFO if adaptive else Severity.WARNING, step=step,
                       frame=frame, op="backward", count=count, optimizer=kind,
                       cause="dynamics.accumulation_not_divided.cause" + (".adaptive" if adaptive else ""),
                       evidence=evidence)

    def flush(self) -> list[Finding]:
        """Findings decided on the last deferred read (the clip after the step among them)."""
        out, self.pending = self.pending, []
        f, self.after_step = self.after_step, None
        if f is None:
            return out
        read = len(self.after_norms)
        if read < 2:
            return out + [f]  # nothing measured: held to what the loss did, like every trend finding
        bit = sum(1 for v, m in self.after_norms if v > m * (1 + 1e-6))
        median = statistics.median(v for v, _ in self.after_norms)
        ev = dict(f.evidence, steps_with_norm_read=read, steps_norm_above_max_norm=bit,
                  median_norm_applied=num(median), max_norm_applied=num(max(v for v, _ in self.after_norms)))
        if 2 * bit > read:
            ev["harm"] = (f"on {bit}/{read} steps the optimizer applied gradients of norm above max_norm "
                          f"(median {num(median)}): the clip that came after would have scaled them down")
            return out + [f.replace(severity=Severity.WARNING, evidence=ev)]
        return out + [f.replace(severity=Severity.INFO, evidence=ev)]


def _factor(root: Any) -> list[Any]:
    """A holder for the factor a chain of scalings applied to a loss: the gradient the deepest
    Div/Mul node of the chain below the root hands its graph input, and the root's own gradient
    (`loss / 4` then a framework's `/ 1`: the product is 1/4), filled by one-shot hooks (public
    `Node.register_hook`)."""
    box: list[Any] = [None, None]
    node, index = root, _graph_input(root)
    for _ in range(MAX_CHAIN):
        nxt = node.next_functions[index][0] if index is not None else None
        if nxt is None or not nxt.name().startswith(_SCALED[:2]):
            break
        i = _graph_input(nxt)
        if i is None:
            break
        node, index = nxt, i
    if index is None:
        return box

    def deep(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...], at: int = index) -> None:
        handles[0].remove()
        g = grad_inputs[at] if len(grad_inputs) > at else None
        if isinstance(g, torch.Tensor) and g.numel() == 1:
            box[0] = g.detach()

    def top(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
        handles[-1].remove()
        go = grad_outputs[0] if grad_outputs else None
        if isinstance(go, torch.Tensor) and go.numel() == 1:
            box[1] = go.detach()

    handles = [node.register_hook(deep)]
    handles.append(root.register_hook(top))
    return box


def _graph_input(node: Any) -> int | None:
    """The one input of `node` that carries a graph (a scaling's loss, not its constant)."""
    found = [i for i, (fn, _) in enumerate(node.next_functions) if fn is not None]
    return found[0] if len(found) == 1 else None


def _parameters(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any], list[Any]]:
    """The clip's parameters as a list (a generator, `model.parameters()`, is listed once and the
    list handed on in its place: the same tensors, the same order)."""
    given = args[0] if args else kwargs.get("parameters")
    if isinstance(given, torch.Tensor):
        return args, kwargs, [given]
    if isinstance(given, (list, tuple)):
        return args, kwargs, list(given)
    if given is None:
        return args, kwargs, []
    listed = list(given)
    if args:
        return (listed, *args[1:]), kwargs, listed
    return args, {**kwargs, "parameters": listed}, listed


def _site(skip: int) -> tuple[Any, ...]:
    """(code, line) of the innermost user frame (a cheap key: no source line is read, no frame kept)."""
    f = user_stack_frame(skip + 1)
    return (f.f_code, f.f_lineno) if f is not None else ()
