"""`diagnose_gradients(model, loss, optimizer=None)`: the gradient chain of one loss, on demand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Union

import torch
import torch.nn as nn

from .._findings import Finding, Report
from .._frames import UserFrame, user_frame_from_stack
from ._analysis import Analysis
from ._graph import reach
from ._loss import explain_loss_without_grad
from ._static import frozen_findings, registration_findings
from ._tracer import CutRecord, CutTracer

LossArg = Union[torch.Tensor, Callable[[], torch.Tensor]]


def _run_instrumented(model: nn.Module, fn: Callable[[], Any], analysis: Analysis,
                      cuts: list[CutRecord], roots: list[tuple[bool, bool, Any]]) -> Any:
    stack: list[str] = []
    handles = []

    def pre(name: str) -> Any:
        def hook(mod: nn.Module, args: Any) -> None:
            stack.append(name)
            if name == "":
                roots.append((torch.is_grad_enabled(), torch.is_inference_mode_enabled(), user_frame_from_stack(2)))
        return hook

    def post(name: str) -> Any:
        def hook(mod: nn.Module, args: Any, out: Any) -> None:
            if stack:
                stack.pop()
            analysis.module_ran(mod, name, out, lambda: user_frame_from_stack(2))
        return hook

    def sink(rec: CutRecord) -> None:
        cuts.append(rec)
        analysis.add_cut(rec)

    tracer = CutTracer(sink, lambda: (None, stack[-1] if stack else None))
    try:
        for name, mod in model.named_modules():
            handles.append(mod.register_forward_pre_hook(pre(name)))
            handles.append(mod.register_forward_hook(post(name), always_call=True))
        with tracer:
            return fn()
    finally:
        for h in handles:
            h.remove()


def diagnose_gradients(model: nn.Module, loss: LossArg,
                       optimizer: torch.optim.Optimizer | list[torch.optim.Optimizer] | None = None) -> Report:
    """Explain, for every trainable parameter of `model`, whether `loss` gives it a gradient, and why not.

    Arguments:
        model: the model whose parameters should be trained.
        loss: the loss tensor, or a function with no argument that runs the forward and returns
            the loss (then torchtriage watches that forward and can name the op and line where a
            path is cut: `.detach()`, `no_grad`, `.item()` → `torch.tensor`, ...).
        optimizer: the optimizer (or a list of them), to check coverage and learning rates.

    Returns:
        A `Report` of findings in category "gradient" (empty when every trainable parameter
        receives a non-zero gradient that its optimizer applies). `.grad` is never written: the
        gradients are computed with `torch.autograd.grad(..., retain_graph=True)`.

    Example:
        >>> report = torchtriage.diagnose_gradients(model, lambda: F.mse_loss(model(x), y), opt)
        >>> print(report)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"diagnose_gradients() takes an nn.Module as model, got {type(model).__name__}")
    if optimizer is None:
        optimizers: list[torch.optim.Optimizer] = []
    elif isinstance(optimizer, torch.optim.Optimizer):
        optimizers = [optimizer]
    elif isinstance(optimizer, (list, tuple)) and all(isinstance(o, torch.optim.Optimizer) for o in optimizer):
        optimizers = list(optimizer)
    else:
        raise TypeError("diagnose_gradients() takes a torch.optim.Optimizer, a list of them or None as optimizer, "
                        f"got {type(optimizer).__name__}")
    label = "model"
    analysis = Analysis([(model, label)])
    cuts: list[CutRecord] = []
    roots: list[tuple[bool, bool, Any]] = []
    call_frame: UserFrame | None = user_frame_from_stack(2)
    if callable(loss) and not isinstance(loss, torch.Tensor):
        loss = _run_instrumented(model, loss, analysis, cuts, roots)
    else:
        analysis.forward_seen = False
    if not isinstance(loss, torch.Tensor):
        raise TypeError("diagnose_gradients() takes a loss tensor or a function returning one, "
                        f"got {type(loss).__name__}")
    findings: list[Finding] = registration_findings(model) + frozen_findings(model)
    if not loss.requires_grad:
        findings.append(explain_loss_without_grad(loss, cuts, roots, [model], step=None, backward_frame=call_frame))
        for oi, opt in enumerate(optimizers):
            analysis.optimizer_step(oi, opt, require_grad=False)
        analysis.reached = set(analysis.params)  # nothing more to say per parameter
        findings += analysis.conclude(optimizers, step=None)
        return Report(tuple(findings), meta={"function": "diagnose_gradients"})
    r = reach([loss])
    analysis.backward_roots(r)
    params = [p for p in model.parameters() if id(p) in r.leaves]
    grads: list[Any]
    try:
        grads = list(torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)) if params else []
    except RuntimeError:  # the graph was already freed by backward(): read .grad instead
        grads = [p.grad for p in params]
    ids = [id(p) for p, g in zip(params, grads) if g is not None and not g.is_sparse]
    dense = [g for g in grads if g is not None and not g.is_sparse]
    if dense:
        # Max-abs per gradient on its own device, read once in conclude() (no read per tensor).
        with torch.no_grad():
            maxes = [g.detach().abs().max() if g.numel() else torch.zeros((), device=g.device) for g in dense]
        analysis.flags.add(maxes, lambda vals: analysis.norms.append((ids, vals)))
    analysis.versions = {id(p): p._version for p in model.parameters()}
    for oi, opt in enumerate(optimizers):
        analysis.optimizer_step(oi, opt, require_grad=False)
    findings += analysis.conclude(optimizers, step=None)
    return Report(tuple(findings), meta={"function": "diagnose_gradients"})
