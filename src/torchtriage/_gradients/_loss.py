"""Why a loss has no `grad_fn`: said before `backward()` raises "element 0 of tensors does not
require grad and does not have a grad_fn" (the session's `on_backward` fires first).

The witnesses are the cut records of the current step (see `_tracer`), the root forwards'
grad mode, and the models' `requires_grad` flags, tried in this order:

    to_python  a value left the graph through `.item()` / `.tolist()` / `.numpy()` / `float()`
               and came back through `torch.tensor(...)` (seed appendix G.3)
    no_grad    the forward (or an op on the way) ran under `torch.no_grad()` / `inference_mode`
    detach     a tensor on the way was detached
    frozen     every parameter of the watched models has `requires_grad=False`
    leaf       the loss was built only from tensors created with `requires_grad=False`
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from .._findings import Finding, Severity, Stage
from .._frames import UserFrame
from ._analysis import make_finding
from ._tracer import CutRecord


def explain_loss_without_grad(loss: torch.Tensor, cuts: list[CutRecord], root_calls: list[tuple[bool, bool, Any]],
                              models: list[nn.Module], *, step: int | None,
                              backward_frame: UserFrame | None,
                              sources: list[tuple[bool, bool, Any]] = (),  # type: ignore[assignment]
                              lost_at: Any = None) -> Finding:
    """A `gradient.loss_no_grad_fn` finding naming the most likely cause and its line.

    Arguments:
        loss: the tensor handed to backward (requires_grad is False).
        cuts: this step's cut records, in execution order.
        root_calls: (grad_enabled, inference_mode, frame) of this step's root forwards.
        models: the watched models.
        sources: the same for the root forwards the loss was computed from (the step record's
            data flow, nearest first; empty when the tape did not see the loss made).
        lost_at: the taped op on the loss's data flow whose input required grad and whose
            output does not (`_pathcut.grad_lost_at`: an argmax, a comparison, a detach).
    """
    by_kind: dict[str, list[CutRecord]] = {}
    for cut in cuts:
        by_kind.setdefault(cut.kind, []).append(cut)
    variant, frame = "leaf", None
    lost_op: str | None = None
    rec: CutRecord | None = None
    rebuild = None
    for tp in by_kind.get("to_python", []):
        later = [r for i, r in enumerate(cuts) if r.kind == "rebuild" and i > cuts.index(tp)]
        if later:
            variant, rec, rebuild = "to_python", tp, later[0]
            break
    if rec is None:
        nograd_roots = [c for c in root_calls if not c[0]]
        nograd_sources = [c for c in sources if not c[0]]
        nograd_ops = by_kind.get("no_grad", []) + by_kind.get("inference_mode", [])
        if lost_at is not None and not nograd_sources and not (lost_at.name == "detach" and by_kind.get("detach")):
            # the data flow shows where: an op with no derivative on the way from the model's output
            variant, frame = ("detach" if lost_at.name == "detach" else "non_differentiable"), lost_at.frame
            lost_op = lost_at.name
        elif nograd_sources:
            # the forward that made the loss's inputs ran without grad: that region cut it
            variant, frame = ("inference_mode" if nograd_sources[0][1] else "no_grad"), nograd_sources[0][2]
        elif root_calls and len(nograd_roots) == len(root_calls) and not sources:
            # the data flow is unknown: the forward nearest to backward() (an evaluation pass
            # earlier in the step, `test(teacher)`, is not the one the loss came from)
            variant, frame = ("inference_mode" if nograd_roots[-1][1] else "no_grad"), nograd_roots[-1][2]
        elif nograd_ops:
            rec = nograd_ops[0]
            variant = "inference_mode" if rec.kind == "inference_mode" else "no_grad"
        elif by_kind.get("detach"):
            variant, rec = "detach", by_kind["detach"][0]
        elif models and not any(p.requires_grad for m in models for p in m.parameters()):
            variant = "frozen"
        elif by_kind.get("to_python"):
            variant, rec = "to_python", by_kind["to_python"][0]
    if rec is not None:
        frame = rec.frame
    fields: dict[str, Any] = dict(
        requires_grad=False, grad_fn=None, is_leaf=bool(loss.is_leaf), shape=list(loss.shape),
        backward_line=f"{backward_frame.file}:{backward_frame.line}" if backward_frame else None,
    )
    if lost_op is not None:
        fields["lost_at"] = f"{frame.file}:{frame.line}" if frame is not None else lost_op
    if rebuild is not None and rebuild.frame is not None:
        fields["rebuilt_at"] = f"{rebuild.frame.file}:{rebuild.frame.line}"
        fields["rebuilt_by"] = rebuild.op
    return make_finding("gradient.loss_no_grad_fn", Severity.ERROR, Stage.BACKWARD,
                        module=rec.module if rec is not None else None,
                        op=rec.op if rec is not None else lost_op,
                        frame=frame or backward_frame, step=step, variant=variant, **fields)
