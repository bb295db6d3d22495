"""BatchNorm running statistics that follow the last batch: a momentum given in TensorFlow's
convention (session 13).

PyTorch's BatchNorm updates `running = (1 - momentum) * running + momentum * batch`: the
momentum is the weight of the NEW batch (default 0.1). Keras / TensorFlow / Flax call the weight
of the OLD value the momentum (`decay`, default 0.99). `momentum=0.99` copied from them makes
each running mean and variance 99% the statistics of the last training batch, so the eval-mode
model normalizes with whichever batch came last. Every correct program keeps the running
statistics an average over many batches: a momentum of 0.5 or more averages over two batches
or fewer.

Found for each BatchNorm that tracks running statistics with `momentum >= 0.5` in a watched
model, at an optimizer's first step. The harm is measured: a forward hook on those modules only
recovers each training batch's statistics exactly from the update (`batch = (running - (1 - m) *
previous) / m`, on the device, no read) and keeps the statistics the intended momentum
(`1 - m`, TensorFlow's reading; at least 0.01) would have given. At the run's end (one read):
the mean distance between the running mean the model keeps and the intended one, in units of the
intended running standard deviation, and the mean jump of the running mean per update. A warning
when the eval-mode normalization is off by at least `HARM` standard deviations and the run did
evaluate in eval mode (a program that never leaves train() mode, MAML's `momentum=1` with batch
statistics at test time, never reads the running statistics), else an info.
The line is the module's construction, read from the source of its parent's class.
"""

from __future__ import annotations

import ast
import inspect
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from .._built_at import _literal
from .._findings import Category, Finding, Severity, Stage
from .._frames import UserFrame, is_user_file, user_files_on_stack, user_frame_of_line
from .._source import parsed
from .._transparent import our_hook, standing_aside
from ._common import finding, num

LIMIT = 0.5  # a momentum at or above this weights the new batch as much as all the past
HARM = 0.1  # mean distance of the kept running mean from the intended one, in running stds
MAX_MODULES = 32
MAX_CHANNELS = 1024


@dataclass
class _Tracked:
    path: str
    momentum: float
    intended: float
    prev: torch.Tensor  # the running mean after the last update seen (a copy, first channels)
    mean: torch.Tensor  # the running mean the intended momentum gives
    var: torch.Tensor  # ... and the running variance
    prev_var: torch.Tensor
    jumps: torch.Tensor  # sum over updates of |running mean - previous|
    updates: int = 0
    evals: int = 0  # eval-mode forwards seen (the running statistics used)
    ref: Any = None
    handle: Any = None


@dataclass
class BnMomentum:
    """The BatchNorms of the watched models whose momentum weights the new batch ≥ `LIMIT`."""

    session: Any
    step: int
    frame: UserFrame | None
    model: str
    tracked: list[_Tracked] = field(default_factory=list)
    modules: int = 0  # BatchNorms found with such a momentum (tracked: the first MAX_MODULES)

    def close(self) -> None:
        for t in self.tracked:
            if t.handle is not None:
                t.handle.remove()
                t.handle = None

    def hook(self, t: _Tracked) -> Any:
        def post(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            __tracebackhide__ = True
            if self.session.busy or standing_aside():
                return
            if not module.training:
                t.evals += 1  # (an eval-mode forward: it normalizes with the running statistics)
                return
            try:
                rm = getattr(module, "running_mean", None)
                rv = getattr(module, "running_var", None)
                if not isinstance(rm, torch.Tensor) or not isinstance(rv, torch.Tensor):
                    return
                k = t.prev.numel()
                with torch.no_grad():
                    m = t.momentum
                    cur = rm.detach()[:k].float()
                    cur_v = rv.detach()[:k].float()
                    batch = (cur - (1 - m) * t.prev) / m
                    batch_v = (cur_v - (1 - m) * t.prev_var) / m
                    t.mean.mul_(1 - t.intended).add_(batch, alpha=t.intended)
                    t.var.mul_(1 - t.intended).add_(batch_v, alpha=t.intended)
                    t.jumps.add_((cur - t.prev).abs())
                    t.prev.copy_(cur)
                    t.prev_var.copy_(cur_v)
                t.updates += 1
            except Exception as e:  # our bug: the user's forward goes on
                self.close()
                self.session.internal_error("dynamics.bn_momentum_last_batch", e)
        return post

    def finding(self) -> Finding | None:
        self.close()
        used = [t for t in self.tracked if t.updates > 0 and t.ref() is not None]
        if not used:
            return None
        rows = []
        with torch.no_grad():
            for t in used:
                mod = t.ref()
                k = t.prev.numel()
                kept = mod.running_mean.detach()[:k].float()
                std = (t.var.clamp_min(0) + float(getattr(mod, "eps", 1e-5))).sqrt()
                off = float(((kept - t.mean).abs() / std).mean())
                jump = float((t.jumps / t.updates / std).mean())
                rows.append((off, jump, t))
        off, jump, worst = max(rows, key=lambda r: (r[2].evals > 0, r[0]))
        harm = off >= HARM and worst.evals > 0
        names = [t.path for t in used]
        return finding("bn_momentum_last_batch", category=Category.SILENT, stage=Stage.FORWARD, step=self.step,
                       severity=Severity.WARNING if harm else Severity.INFO, frame=self.frame, module=worst.path,
                       path=worst.path, parameter="running_mean, running_var", op=type(worst.ref()).__name__,
                       momentum=num(worst.momentum), keep=num(1 - worst.momentum), count=self.modules,
                       examples=", ".join(names[:3]), intended=num(worst.intended), off=f"{off:.3g}",
                       jump=f"{jump:.3g}", updates=worst.updates,
                       evidence={"module": worst.path, "momentum": worst.momentum,
                                 "new_batch_weight": worst.momentum, "kept_weight": round(1 - worst.momentum, 6),
                                 "batchnorms_with_momentum_ge_0.5": self.modules, "modules": names[:8],
                                 "intended_momentum": round(worst.intended, 6), "running_stat_updates": worst.updates,
                                 "eval_mode_forwards": worst.evals,
                                 "running_mean_off_intended_in_stds": round(off, 4),
                                 "mean_jump_per_update_in_stds": round(jump, 4),
                                 **({"harm": f"the eval-mode running mean of {worst.path} is {off:.3g} running "
                                             f"standard deviations away from the average the momentum "
                                             f"{num(worst.intended)} would keep, after {worst.updates} updates, "
                                             f"and {worst.evals} eval-mode forwards normalized with it"}
                                    if harm else {})})


def _momentum_line(mod: nn.Module, parent: nn.Module | None, momentum: float) -> UserFrame | None:
    """The construction of `mod` in its parent's class source or the files on the stack (a builder
    function): a call named like its class
    whose `momentum=` agrees with its momentum (a literal equal to it first)."""
    files: list[str] = []
    for cls in [type(parent)] if parent is not None else []:
        try:
            path = inspect.getsourcefile(cls)
        except (TypeError, OSError):
            continue
        if path and is_user_file(path):
            files.append(path)
    files.extend(p for p in user_files_on_stack(2) if p not in files)  # (a builder function: nn.Sequential(...))
    best: tuple[int, int, str, str] | None = None
    for path in files[:8]:
        tree = parsed(path)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if "BatchNorm" not in callee and callee != type(mod).__name__:
                continue
            kw = next((k for k in node.keywords if k.arg == "momentum"), None)
            if kw is None:
                score = 0
            else:
                v = _literal(kw.value)
                score = 2 if isinstance(v, (int, float)) and abs(v - momentum) < 1e-9 else (
                    -1 if isinstance(v, (int, float)) else 1)
            cand = (score, -node.lineno, path, "")
            if best is None or cand[:2] > best[:2]:
                best = cand
    if best is None or best[0] < 0:
        return None
    return user_frame_of_line(best[2], -best[1], "__init__")


def fast_batchnorms(session: Any, step: int) -> BnMomentum | None:
    """The BatchNorms of the watched models that track running statistics with a momentum
    ≥ `LIMIT`, hooked to measure the harm; None when there are none."""
    found: BnMomentum | None = None
    seen: set[int] = set()
    for model in list(getattr(session, "models", [])):
        parents = {id(c): p for p in model.modules() for c in p.children()}
        for path, mod in model.named_modules():
            if id(mod) in seen or not isinstance(mod, nn.modules.batchnorm._BatchNorm):
                continue
            seen.add(id(mod))
            m = mod.momentum
            if not mod.track_running_stats or not isinstance(m, (int, float)) or m < LIMIT or m > 1:
                continue
            rm, rv = mod.running_mean, mod.running_var
            if not isinstance(rm, torch.Tensor) or not isinstance(rv, torch.Tensor):
                continue
            if found is None:
                found = BnMomentum(session, step, _momentum_line(mod, parents.get(id(mod)), float(m)),
                                   type(model).__name__)
            found.modules += 1
            if len(found.tracked) >= MAX_MODULES:
                continue
            with torch.no_grad():
                k = min(rm.numel(), MAX_CHANNELS)
                mean = rm.detach()[:k].float().clone()
                var = rv.detach()[:k].float().clone()
            t = _Tracked(path, float(m), max(0.01, min(0.1, 1.0 - float(m))), mean.clone(), mean, var,
                         var.clone(), torch.zeros_like(mean), ref=weakref.ref(mod))
            t.handle = mod.register_forward_hook(our_hook(found.hook(t)))
            found.tracked.append(t)
    return found
