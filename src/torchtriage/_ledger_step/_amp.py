"""Gradients read or rewritten while they still carry the GradScaler's factor (issue 26).

Under `scaler.scale(loss).backward()` every `.grad` is the true gradient times the scale
(65536 by default). `scaler.step(opt)` divides it out before the update; anything that reads or
rewrites the gradients in between must come after `scaler.unscale_(opt)`, or it works on the
scaled numbers: `clip_grad_norm_(params, 1.0)` then measures a norm ~scale times too large and
shrinks every gradient by that factor (training all but stops), `clip_grad_value_` clips at a
threshold the scale makes meaningless.

The scaler's `scale`, `unscale_` and `step` and the two clipping functions are wrapped for
the session (removed on exit; they only observe). A clip whose parameters an optimizer holds,
after a backward of a scaled loss and before that optimizer was unscaled, is the finding. The
returned norm (one read, once) says whether the clip engaged: a warning when it did (the
update was shrunk), an info otherwise (the clip never engages at this threshold).
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
import torch.nn.utils as nn_utils
from torch.nn.utils import clip_grad as _clip_grad

from .._findings import Category, Severity, Stage, from_catalogue
from .._frames import user_frame_from_stack


class ScaledGradWatch:
    def __init__(self, session: Any, on_offer: Any, on_clip: Any = None) -> None:
        self.session = session
        self.on_offer = on_offer  # ledger: a scaler.step offers the optimizer a step
        self.on_clip = on_clip  # (params, result) of a clip while it wants them (discard watch)
        self._outputs: list[tuple[weakref.ref[torch.Tensor], weakref.ref[Any]]] = []
        self.scaled: dict[int, Any] = {}  # id(scaler) -> scaler with a scaled backward since its step
        self.unscaled: set[tuple[int, int]] = set()  # (scaler, optimizer) unscaled since
        self.reported = False

    def install(self) -> None:
        try:
            from torch.amp import GradScaler
        except ImportError:  # pragma: no cover - torch < 2.3
            return
        sess, watch = self.session, self

        scale0, unscale0, step0 = GradScaler.scale, GradScaler.unscale_, GradScaler.step

        @functools.wraps(scale0)
        def scale(scaler: Any, outputs: Any) -> Any:
            out = scale0(scaler, outputs)
            if isinstance(out, torch.Tensor) and not sess.busy and scaler.is_enabled():
                watch._outputs = [(weakref.ref(out), weakref.ref(scaler))]
            return out

        @functools.wraps(unscale0)
        def wrapped(scaler: Any, optimizer: Any) -> Any:  # (the name of a pass-through wrapper)
            watch.unscaled.add((id(scaler), id(optimizer)))
            return unscale0(scaler, optimizer)

        @functools.wraps(step0)
        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            if not sess.busy:
                try:
                    watch.on_offer(optimizer)
                except Exception as e:
                    sess.internal_error("ledger.amp", e)
            watch.unscaled.discard((id(scaler), id(optimizer)))
            return step0(scaler, optimizer, *args, **kwargs)

        sess.patch(GradScaler, "scale", scale)
        sess.patch(GradScaler, "unscale_", wrapped)
        sess.patch(GradScaler, "step", step)
        for name in ("clip_grad_norm_", "clip_grad_value_"):
            current = getattr(_clip_grad, name)
            wrapped = self._wrap_clip(current, name)
            sess.patch(_clip_grad, name, wrapped)
            if getattr(nn_utils, name, None) is current:
                sess.patch(nn_utils, name, wrapped)

    def backward(self, roots: tuple[Any, ...]) -> None:
        for ref, sref in self._outputs:
            out, scaler = ref(), sref()
            if out is not None and scaler is not None and any(r is out for r in roots):
                self.scaled[id(scaler)] = scaler

    def stepped(self) -> None:
        """An update happened: a scaled backward is judged again from the next one."""
        self.scaled.clear()

    def _wrap_clip(self, original: Any, name: str) -> Any:
        watch = self

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            suspect, items = None, None
            busy = watch.session.busy
            clip = watch.on_clip if watch.on_clip is not None and not busy and watch.on_clip.wanted() else None
            if (watch.scaled and not watch.reported and not busy) or clip is not None:
                try:
                    args, kwargs, items = _replayable(args, kwargs)
                    if watch.scaled and not watch.reported and not busy:
                        suspect = watch._suspect(items)
                except Exception as e:
                    watch.session.internal_error("ledger.amp", e)
            result = original(*args, **kwargs)
            if clip is not None and items is not None:
                try:
                    clip.clipped(items, result)
                except Exception as e:
                    watch.session.internal_error("ledger.discarded", e)
            if suspect is not None:
                try:
                    watch._report(name, suspect, args, kwargs, result)
                except Exception as e:
                    watch.session.internal_error("ledger.amp", e)
            return result

        return wrapped

    def _suspect(self, params: list[Any]) -> tuple[Any, Any, Any] | None:
        ids = {id(p) for p in params if isinstance(p, torch.Tensor)}
        for opt in self.session.optimizers:
            if not any(id(p) in ids for g in opt.param_groups for p in g["params"]):
                continue
            for sid, scaler in self.scaled.items():
                if (sid, id(opt)) not in self.unscaled:
                    return scaler, opt, user_frame_from_stack(3)
        return None

    def _report(self, name: str, suspect: tuple[Any, Any, Any], args: tuple[Any, ...],
                kwargs: dict[str, Any], result: Any) -> None:
        scaler, opt, frame = suspect
        self.reported = True
        limit = args[1] if len(args) > 1 else kwargs.get("max_norm", kwargs.get("clip_value"))
        limit = float(limit) if isinstance(limit, (int, float)) else None
        scale = float(scaler.get_scale())  # once, for the finding
        norm = float(result) if isinstance(result, torch.Tensor) and result.numel() == 1 else None
        engaged = norm is not None and limit is not None and norm > limit
        sess = self.session
        index = sess.optimizers.index(opt) if opt in sess.optimizers else None
        evidence: dict[str, Any] = {"scale": scale, "limit": limit, "optimizer": index}
        if norm is not None:
            evidence["norm_measured"] = norm
            evidence["norm_unscaled"] = norm / scale if scale else None
            evidence["clip_engaged"] = engaged
        fields = {"fn": name, "scale": f"{scale:g}", "step": sess.step}
        sess.add(from_catalogue(Category.GRADIENT, "gradient.clip_before_unscale", "ledger.clip_before_unscale",
                                fields=fields, cause_key="ledger.clip_before_unscale.cause",
                                next_key="ledger.clip_before_unscale.next", frame=frame, evidence=evidence,
                                source_line=True, severity=Severity.WARNING if engaged else Severity.INFO,
                                stage=Stage.BACKWARD, step=sess.step, op=name))



def _replayable(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any], list[Any]]:
    """The call's arguments and its parameters as a list; an iterator of parameters is read
    once and handed on as a fresh generator over the same tensors (the clip sees what it would
    have seen, an empty generator warns as before)."""
    params = args[0] if args else kwargs.get("parameters")
    if params is None:
        return args, kwargs, []
    if isinstance(params, torch.Tensor):
        return args, kwargs, [params]
    if isinstance(params, (list, tuple)):
        return args, kwargs, list(params)
    items = list(params)
    again = (p for p in items)
    if args:
        return (again, *args[1:]), kwargs, items
    return args, {**kwargs, "parameters": again}, items
