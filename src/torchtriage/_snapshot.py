"""What is needed to run a training step again: the batch, the RNG states, and (on request)
the model's and optimizers' state before the step.

The session keeps one `StepSnapshot` for the current step (`session.snapshot`). By default it
holds references only (the batch as passed to the root model, the RNG states read at the step's
start: no copy of parameters, so it costs next to nothing). With `keep_state=True` (set by
repro bundles) it also clones the parameters, buffers and optimizer state at the step's start,
so that a step whose *update* broke the parameters can still be replayed from before it.

Parameters are not changed between the step's start and `optimizer.step()`, so a replay of
forward/backward done at `on_optimizer_step_pre` or earlier needs no copy at all.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch
import torch.nn as nn

from ._checker import Checker
from ._frames import UserFrame, user_frame_from_stack


@dataclasses.dataclass
class StepSnapshot:
    step: int
    rng_cpu: torch.Tensor
    rng_cuda: list[torch.Tensor] | None = None
    model: nn.Module | None = None
    model_label: str | None = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    model_states: dict[str, dict[str, torch.Tensor]] | None = None  # label -> state_dict clone
    optimizer_states: list[dict[str, Any]] | None = None
    call_frame: UserFrame | None = None

    def restore_rng(self) -> None:
        """Put the RNGs back where they were at the step's start."""
        torch.set_rng_state(self.rng_cpu)
        if self.rng_cuda is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(self.rng_cuda)

    @property
    def has_batch(self) -> bool:
        return self.model is not None


def _cuda_rng() -> list[torch.Tensor] | None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.get_rng_state_all()
    return None


@torch.no_grad()
def clone_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}


def clone_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    sd = optimizer.state_dict()
    return copy.deepcopy(sd)


class SnapshotKeeper(Checker):
    """Always attached by the session (not a user-facing check): fills `session.snapshot`."""

    name = "snapshot"

    def on_step_begin(self, step: int) -> None:
        assert self.session is not None
        sess = self.session
        snap = StepSnapshot(step=step, rng_cpu=torch.get_rng_state(), rng_cuda=_cuda_rng())
        if sess.options.get("keep_state"):
            # on_step_begin fires before the step's first forward: parameters are still as
            # the previous update left them.
            snap.model_states = {sess.model_label(m) or str(i): clone_state(m) for i, m in enumerate(sess.models)}
            snap.optimizer_states = [clone_optimizer_state(o) for o in sess.optimizers]
        sess.snapshot = snap

    def on_root_forward(self, model: nn.Module, label: str, args: tuple[Any, ...],
                        kwargs: dict[str, Any], output: Any) -> None:
        snap = self.session.snapshot if self.session is not None else None
        if snap is None or snap.model is not None:
            return  # the step's first root call is the batch; later calls are other models
        snap.model, snap.model_label, snap.args, snap.kwargs = model, label, args, dict(kwargs)
        snap.call_frame = user_frame_from_stack(2)  # the user's line that called the model
