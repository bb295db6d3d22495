"""What a DistributedDataParallel model tells about a step: which parameters received a
gradient (a tensor hook per parameter: it sees the rank's *local* gradient, before DDP's
reducer copies it into a bucket and all-reduces it), and whether those local gradients were
finite (one on-device sum per parameter, read with the step's one host read).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from .. import _deferred
from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import user_frame_from_stack
from .._transparent import our_hook


def is_ddp(model: nn.Module) -> bool:
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)


def replayable(ddp: nn.Module) -> bool:
    """Whether the wrapped module can run alone (no collectives): not when it has no forward of
    its own (Lightning wraps the LightningModule and redirects DDP's forward to training_step)."""
    inner = getattr(ddp, "module", None)
    forward = getattr(type(inner), "forward", None)
    return inner is not None and forward is not getattr(nn.Module, "forward", None) \
        and getattr(forward, "__qualname__", "") != "LightningModule.forward"


class DDPWatch:
    """The hooks on one DDP model's parameters (removed by `remove()`)."""

    def __init__(self, ddp: nn.Module, flags: _deferred.DeferredFlags, tracker: Any = None) -> None:
        self.ddp = ddp
        inner = ddp.module
        assert isinstance(inner, nn.Module)  # DistributedDataParallel.module: the wrapped model
        self.names = [n for n, p in inner.named_parameters() if p.requires_grad]
        params = [p for _, p in inner.named_parameters() if p.requires_grad]
        self.used: set[int] = set()
        self.sums: list[torch.Tensor] = []
        self.flags = flags
        self.sync_expected = False
        self.ever_unused = False
        self.steps_checked = 0
        self.handles = [p.register_hook(self._hook(i)) for i, p in enumerate(params)]
        if tracker is not None:
            # DDP's forward can block in a collective too (buffer broadcast, the bucket rebuild
            # of its second iteration): mark it for the stall watchdog.
            def pre(module: nn.Module, args: Any) -> None:
                tracker.enter("ddp_forward", user_frame_from_stack(2), record=False)

            def post(module: nn.Module, args: Any, output: Any) -> None:
                tracker.leave()

            self.handles.append(ddp.register_forward_pre_hook(our_hook(pre)))
            self.handles.append(ddp.register_forward_hook(our_hook(post), always_call=True))

    def _hook(self, index: int) -> Any:
        used, sums = self.used, self.sums

        def hook(grad: torch.Tensor) -> None:
            used.add(index)
            if grad.is_floating_point():
                sums.append(grad.detach().sum(dtype=torch.float32) if grad.dtype != torch.float64
                            else grad.detach().sum())

        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def forward_seen(self) -> None:
        # DDP prepares a gradient reduction for this forward when grad mode is on and the
        # model is not in no_sync(): read as DDP itself reads them, in its forward.
        self.sync_expected = torch.is_grad_enabled() and bool(getattr(self.ddp, "require_backward_grad_sync", True))

    def backward_done(self, on_flags: Any) -> list[str]:
        """Queue this backward's local-gradient sums; return the parameters DDP expected a
        gradient for and that got none (empty when no reduction was due)."""
        if self.sums:
            self.flags.add(list(self.sums), on_flags)
            self.sums.clear()
        unused: list[str] = []
        if self.sync_expected:
            self.steps_checked += 1
            unused = [n for i, n in enumerate(self.names) if i not in self.used]
            if unused:
                self.ever_unused = True
        self.used.clear()
        self.sync_expected = False
        return unused

    def pending_sums(self, on_flags: Any) -> None:
        if self.sums:
            self.flags.add(list(self.sums), on_flags)
            self.sums.clear()

    @property
    def checks_unused(self) -> bool:
        """DDP raises on unused parameters (the default): neither find_unused nor static_graph."""
        return not getattr(self.ddp, "find_unused_parameters", False) and not getattr(self.ddp, "static_graph", False)


def unused_finding(names: list[str], step: int, label: str) -> Finding:
    modules = sorted({n.rpartition(".")[0] or "<root>" for n in names})
    shown = ", ".join(names[:8]) + (f", ... (+{len(names) - 8})" if len(names) > 8 else "")
    return from_catalogue(Category.DISTRIBUTED, "distributed.unused_parameters", "dist.unused",
                          fields={"count": len(names), "step": step, "names": shown, "modules": ", ".join(modules)},
                          cause_key="dist.cause.unused", next_key="dist.next.unused",
                          evidence={"unused parameters": names, "modules": modules, "model": label},
                          severity=Severity.ERROR, stage=Stage.BACKWARD, step=step,
                          module=modules[0] if len(modules) == 1 else None,
                          parameter=names[0] if len(names) == 1 else None)


def find_unused_idle(steps: int, label: str) -> Finding:
    return from_catalogue(Category.DISTRIBUTED, "distributed.find_unused_idle", "dist.find_unused_idle",
                          fields={"steps": steps}, cause_key="dist.cause.find_unused_idle",
                          next_key="dist.next.find_unused_idle", evidence={"model": label, "steps checked": steps},
                          severity=Severity.INFO)


def received_finding(step: int, local_sums: list[float]) -> Finding:
    return from_catalogue(Category.DISTRIBUTED, "distributed.nonfinite_received", "dist.received",
                          fields={"step": step}, cause_key="dist.cause.received",
                          next_key="dist.next.received_unknown",
                          evidence={"local gradients finite": all(math.isfinite(v) for v in local_sums),
                                    "local gradient tensors checked": len(local_sums)},
                          severity=Severity.INFO, stage=Stage.BACKWARD, step=step)
