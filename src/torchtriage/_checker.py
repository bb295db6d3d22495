"""The interface every check plugs into a `Session` through.

A `Checker` overrides the events it needs; the session installs only the hooks that some
attached checker uses (an event method left as the base class's costs nothing). Checkers
report through `self.session.add(finding)`; they never raise into the user's code (the
session catches their errors and warns once), never change tensors the user computes, and
never sync the host per tensor: accumulate flags on the device and read them at most once
per step (`on_step_end` or `on_optimizer_step_pre`).

Event order within one training step:
    on_step_begin → on_root_forward_pre → (on_forward_pre / on_forward)* → on_root_forward → on_loss*
    → on_backward → on_backward_end → on_optimizer_step_pre → on_optimizer_step_post
    → on_step_end
`on_model` / `on_optimizer` fire once when a model or optimizer first becomes known,
`on_raise` then `on_exception` when the watched code raises, `on_end` when the session closes.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

if TYPE_CHECKING:
    from ._frames import UserFrame
    from ._session import Session


# The `torch.nn.functional` losses whose calls are announced as `on_loss` (the session wraps them).
LOSS_FUNCTIONS = (
    "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "cross_entropy", "nll_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss",
    "gaussian_nll_loss", "soft_margin_loss", "multilabel_soft_margin_loss", "cosine_embedding_loss",
    "margin_ranking_loss", "hinge_embedding_loss", "triplet_margin_loss", "ctc_loss",
)


@dataclasses.dataclass
class LossCall:
    """One call of a `torch.nn.functional` loss (module losses call these too)."""

    name: str  # e.g. "cross_entropy"
    input: Any
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any
    frame: UserFrame | None
    module: str | None  # path of the loss module when called through one (e.g. nn.MSELoss)

    def option(self, key: str, default: Any = None) -> Any:
        """An argument of the call by its name, passed by keyword or by position: `nn.CTCLoss`
        passes `reduction` positionally (`F.ctc_loss(..., self.blank, self.reduction, ...)`)."""
        if key in self.kwargs:
            return self.kwargs[key]
        at = _positions(self.name).get(key)
        return self.args[at] if at is not None and at < len(self.args) else default


@functools.lru_cache(maxsize=64)
def _positions(name: str) -> dict[str, int]:
    """The positions of a `torch.nn.functional` loss's parameters (its own signature, unwrapped)."""
    fn = getattr(torch.nn.functional, name, None)
    try:
        params = inspect.signature(inspect.unwrap(fn)).parameters if fn is not None else {}
    except (TypeError, ValueError):
        return {}
    return {p: i for i, (p, v) in enumerate(params.items())
            if v.kind in (v.POSITIONAL_ONLY, v.POSITIONAL_OR_KEYWORD)}


class Checker:
    """Base class: override the events you need. `name` identifies the check in options."""

    name: str = "checker"

    def __init__(self) -> None:
        self.session: Session | None = None

    # lifecycle
    def on_start(self, session: Session) -> None:
        pass

    def on_model(self, model: nn.Module, label: str) -> None:
        pass

    def on_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        pass

    def on_step_begin(self, step: int) -> None:
        pass

    # forward (module hooks are installed only when a checker overrides these)
    def on_forward_pre(self, module: nn.Module, name: str, args: tuple[Any, ...]) -> None:
        pass

    def on_forward(self, module: nn.Module, name: str, args: tuple[Any, ...],
                   kwargs: dict[str, Any], output: Any) -> None:
        pass

    def on_root_forward_pre(self, model: nn.Module, label: str) -> None:
        """A watched model is called at the top level (before its forward runs)."""

    def on_root_forward(self, model: nn.Module, label: str, args: tuple[Any, ...],
                        kwargs: dict[str, Any], output: Any) -> None:
        pass

    # loss / backward / optimizer
    def on_loss(self, call: LossCall) -> None:
        pass

    def on_backward(self, roots: tuple[torch.Tensor, ...], grads: Any) -> None:
        pass

    def on_backward_end(self, roots: tuple[torch.Tensor, ...]) -> None:
        pass

    def on_nested_backward(self, roots: tuple[torch.Tensor, ...]) -> None:
        """A backward called while another runs: autograd's own work inside the user's backward
        (a reentrant checkpoint backpropagating through its recomputed block). Not a loss, not a
        new step; `on_backward` is not called for it."""

    def on_optimizer_step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        pass

    def on_closure_call(self, optimizer: torch.optim.Optimizer) -> None:
        """A closure-driven `optimizer.step(closure)` calls its closure again (LBFGS's line
        search): from the second call of the step on, before the call runs."""

    def on_optimizer_step_post(self, optimizer: torch.optim.Optimizer) -> None:
        pass

    def on_step_end(self, step: int) -> None:
        pass

    # endings
    def on_raise(self, exc: BaseException) -> None:
        """The watched code raised `exc`. Before any check explains it (`on_exception`), a check
        settles what it measured in the step so far: the first anomaly may come before the
        error (a NaN batch, then NaN logits refused by a distribution), and the explanation
        then counts the error on it."""

    def on_exception(self, exc: BaseException) -> None:
        pass

    def on_end(self) -> None:
        pass

    def wants_step(self, step: int) -> bool:
        """Whether the check takes part in training step `step`; asked once, when the step
        begins. A check that says no receives none of that step's events (`on_step_begin`
        through `on_step_end`); the lifecycle events (`on_start`, `on_model`, `on_optimizer`,
        `on_exception`, `on_end`) always arrive. A check whose bug shows on every step it
        happens in (a wrong target, a kept graph) can look at its first steps and then a sample
        of them: on a small model each check's per-step Python costs a measurable share."""
        return True

    def wants_module_events(self) -> bool:
        """For a check that implements `on_forward_pre` / `on_forward`: whether it still needs
        them. Once no check does, the session drops its global module hooks (every module call
        pays for them) and keeps hooks on the watched roots only."""
        return True


# Events delivered whatever `wants_step` says (they are not part of a step).
LIFECYCLE_EVENTS = frozenset({"on_start", "on_model", "on_optimizer", "on_raise", "on_exception", "on_end"})


def overrides(checker: Checker, event: str) -> bool:
    """True when `checker` implements `event` itself."""
    return getattr(type(checker), event) is not getattr(Checker, event)
