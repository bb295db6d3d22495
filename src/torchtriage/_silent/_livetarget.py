"""A regression target that carries gradient into the parameters being trained (session 19).

A regression loss `mse_loss(prediction, target)` moves the prediction toward a target that the
update treats as fixed. When the target was computed with grad from the very parameters the
prediction reaches, `backward()` also moves the target toward the prediction: the loss
differentiates through its own target. For a bootstrapped (TD) target `r + γ·Q(s')` this turns
Q-learning's semi-gradient update into a residual-gradient one, which on stochastic transitions
converges to other values (the double-DQN target valued by the online network, not detached).

Measured per loss line, on the sampled steps: the target and the prediction each reach a set of
leaves (one bounded walk of each graph: `_gradients._graph.reach`); the parameters both reach
that an optimizer holds are the shared ones. A one-shot hook on the target reads the gradient
backward hands it (riding the silent check's deferred read): a target that received a nonzero
gradient on every such call carried it into those parameters.
  * the target has the bootstrap form (a sum, at its top past views, of a term that needs no
    grad — the reward — and one that reaches the shared parameters), seen on `MIN_CALLS` calls,
    gradient into the target on all of them -> `silent.target_not_detached`, a warning;
  * another target sharing parameters with the prediction (a consistency loss between two
    views, which some methods mean) -> the same id, an info.
Quiet: a target from a target network (no shared parameter), a detached or `no_grad` target,
a target that reaches only parameters no optimizer holds.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame
from .._gradients._graph import grad_fn_of, reach

LOSSES = frozenset({"mse_loss", "smooth_l1_loss", "huber_loss", "l1_loss"})
MIN_CALLS = 3
MAX_SITES = 8
MAX_CALLS = 32  # calls walked per site
MAX_NODES = 20_000
_VIEWS = ("View", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Clone", "ToCopy", "Gather", "Select", "Slice",
          "Permute", "Transpose", "T")


@dataclasses.dataclass
class _Site:
    frame: UserFrame | None
    loss: str
    calls: int = 0  # calls whose target shared trained parameters with the prediction
    bootstrap: int = 0  # of those, targets of the bootstrap form
    shared: int = 0  # shared parameters (the most seen)
    names: list[str] = dataclasses.field(default_factory=list)
    grads: list[float] = dataclasses.field(default_factory=list)  # |gradient into the target|, read
    walked: int = 0
    first_step: int | None = None


def _bootstrap(target: torch.Tensor) -> bool:
    """A sum at the target's top (past views) one of whose inputs needs no grad."""
    fn, _ = grad_fn_of(target)
    for _ in range(8):
        if fn is None:
            return False
        name = type(fn).__name__
        kids = [k for k, _ in fn.next_functions]
        if name.startswith(("AddBackward", "SubBackward")):
            return len(kids) == 2 and sum(k is None for k in kids) == 1
        if not name.removesuffix("Backward0").removesuffix("Backward1").startswith(_VIEWS):
            return False
        live = [k for k in kids if k is not None]
        if len(live) != 1:
            return False
        fn = live[0]
    return False


class LiveTargets:
    """Per regression-loss line: targets that share trained parameters with the prediction."""

    def __init__(self, session: Any, defer: Any) -> None:
        self.session = session
        self.defer = defer
        self.sites: dict[Any, _Site] = {}
        self.open = True  # a hook of a target still alive after the session does nothing

    def loss(self, name: str, inp: Any, tgt: Any, frame: UserFrame | None, step: int) -> None:
        if name not in LOSSES or not isinstance(inp, torch.Tensor) or not isinstance(tgt, torch.Tensor):
            return
        if not (inp.requires_grad and tgt.requires_grad and torch.is_grad_enabled()):
            return
        key = (frame.file, frame.line) if frame is not None else name
        site = self.sites.get(key)
        if site is None:
            if len(self.sites) >= MAX_SITES:
                return
            site = self.sites[key] = _Site(frame, name)
        if site.walked >= MAX_CALLS:
            return
        site.walked += 1
        r_tgt = reach([tgt], max_nodes=MAX_NODES)
        if not r_tgt.leaves:
            return
        r_inp = reach([inp], max_nodes=MAX_NODES)
        index = self.session.param_index
        shared = []
        for pid, leaf in r_tgt.leaves.items():
            if pid in r_inp.leaves and leaf.requires_grad:
                info = index.info(leaf)
                if info is not None and info.optimizer is not None:
                    shared.append(info.qualname)
        if not shared:
            return
        site.calls += 1
        site.bootstrap += _bootstrap(tgt)
        if site.first_step is None:
            site.first_step = step
        if len(shared) > site.shared:
            site.shared, site.names = len(shared), shared[:4]
        box = site.grads
        handle: list[Any] = []

        def seen(g: torch.Tensor) -> None:
            handle[0].remove()
            if self.open:
                self.defer([g.detach().abs().sum().float()], lambda v: box.append(v[0]) if v else None)

        handle.append(tgt.register_hook(seen))

    def findings(self) -> list[Finding]:
        self.open = False
        out: list[Finding] = []
        for site in self.sites.values():
            if site.calls < MIN_CALLS:
                continue
            carried = sum(1 for v in site.grads if v > 0)
            warn = site.bootstrap == site.calls and site.grads and carried == len(site.grads)
            kind = "bootstrap" if site.bootstrap == site.calls else "other"
            ev = {"loss": site.loss, "calls_with_shared_parameters": site.calls, "bootstrap_form_calls": site.bootstrap,
                  "shared_trained_parameters": site.shared, "examples": site.names,
                  "calls_gradient_read": len(site.grads), "calls_target_received_gradient": carried}
            if warn:
                ev["harm"] = (f"on {carried}/{len(site.grads)} calls backward sent gradient through the target into "
                              f"{site.shared} trained parameter(s) the prediction also reaches")
            out.append(from_catalogue(
                Category.GRADIENT, "silent.target_not_detached", f"silent.target_not_detached.{kind}",
                fields={"loss": site.loss, "calls": site.calls, "shared": site.shared,
                        "names": ", ".join(site.names[:3]), "carried": carried, "read": len(site.grads)},
                cause_key=f"silent.target_not_detached.cause.{kind}", next_key="silent.target_not_detached.next",
                frame=site.frame, evidence=ev, source_line=True,
                severity=Severity.WARNING if warn else Severity.INFO, stage=Stage.LOSS, step=site.first_step,
                op=site.loss, parameter=", ".join(site.names[:2]) or None))
        self.sites.clear()
        return out

