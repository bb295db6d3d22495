"""What is needed to run a training step again: the batch, the RNG states, and (on request)
the model's and optimizers' state before the step.

The session keeps one `StepSnapshot` for the current step (`session.snapshot`). By default it
holds references only (the batch as passed to the root model, the RNG states read at the step's
start: no copy of parameters, so it costs next to nothing). With `keep_state=True` (set by
repro bundles) it also clones the parameters, buffers and optimizer state at the step's start,
so that a step whose *update* broke the parameters can still be replayed from before it.

Parameters are not changed between the step's start and `optimizer.step()`, so a replay of
forward/backward done at `on_optimizer_step_pre` or earlier needs no copy at all.

The snapshot also carries the step's `StepRecord` (`_step.py`, issue 11): every root call, the
depth-0 ops while the tape is on, the backward calls. The keeper owns the tape: pushed for the
warm-up steps (`step_tape_steps`, default 3), for steps after `arm()` (a non-finite value that
could not be localized without it), or always (`step_tape="always"`); never with
`step_tape="off"`.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch
import torch.nn as nn

from ._checker import Checker
from ._findings import Stage
from ._frames import UserFrame, user_frame_from_stack
from ._step import StepRecord, StepTape


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
    record: StepRecord = dataclasses.field(default_factory=StepRecord)

    def restore_rng(self) -> None:
        """Put the RNGs back where they were at the step's start (for a step with no model call,
        before its first recorded op)."""
        cpu, cuda = self.rng_cpu, self.rng_cuda
        if not self.record.calls and self.record.early_rng is not None:
            cpu, cuda = self.record.early_rng
        torch.set_rng_state(cpu)
        if cuda is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(cuda)

    @property
    def has_batch(self) -> bool:
        return self.model is not None


def _cuda_rng() -> list[torch.Tensor] | None:
    # (is_initialized first: a flag; is_available asks the driver, ~7 us a step on a CPU build)
    if torch.cuda.is_initialized() and torch.cuda.is_available():
        return torch.cuda.get_rng_state_all()
    return None


@torch.no_grad()
def clone_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}


def clone_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    sd = optimizer.state_dict()
    return copy.deepcopy(sd)


class SnapshotKeeper(Checker):
    """Always attached by the session (not a user-facing check): fills `session.snapshot` and
    its step record, and owns the depth-0 tape."""

    name = "snapshot"

    def __init__(self) -> None:
        super().__init__()
        self.tape: StepTape | None = None
        self.mode = "warmup"
        self.tape_steps = 3
        self._armed_until = -1
        self._held_until = -1  # a check reads the tape on the steps before this one
        self._failed = False
        self._early = StepRecord()  # ops before the step's first model call
        self._open = False
        self._in_root = 0
        self._lifted = False  # the tape taken off for a root forward, to go back after it
        self._in_backward = False
        self.rerun_at: int | None = None

    # ------------------------------------------------------------------ the tape
    def on_start(self, session: Any) -> None:
        self.mode = str(session.options.get("step_tape", "warmup"))
        self.tape_steps = int(session.options.get("step_tape_steps", 3))
        # the rerun of a script whose NaN could not be localized (issue 27): that step taped
        self.rerun_at = session.options.get("rerun_at")
        if self.rerun_at is not None and self.mode == "off":
            self.mode = "warmup"
        if self.mode != "off":
            self.tape = StepTape(self)
            self._sync_tape(session.step)

    def wants_tape(self, step: int) -> bool:
        if self.tape is None:
            return False
        if step < self._held_until or step == self.rerun_at:
            return True
        return self.mode == "always" or (self.mode != "off" and step < self.tape_steps) or step <= self._armed_until

    def hold_tape(self, until_step: int) -> None:
        """Keep the tape on for the steps before `until_step`, whatever `step_tape` says: a check
        reads the step's ops off it (the silent check's loss region on its warm-up steps). One
        tape serves the step record and the checks."""
        if self._failed or until_step <= self._held_until:
            return
        self._held_until = until_step
        if self.tape is None:
            self.tape = StepTape(self)
        if self.session is not None:
            self._sync_tape(self.session.step)

    def arm(self, steps: int = 3) -> None:
        """Keep the tape on for the next `steps` steps (a step that could not be replayed without it)."""
        if self.tape is not None and self.session is not None and self.mode != "off":
            self._armed_until = self.session.step + steps

    def _sync_tape(self, step: int) -> None:
        if self.tape is None:
            return
        if self.wants_tape(step):
            self.tape.push_mode()
        else:
            self.tape.pop_mode()

    def tape_failed(self) -> None:
        self.mode = "off"
        self._failed = True
        self._armed_until = self._held_until = -1
        if self.tape is not None and self.tape.pop_mode():
            self.tape = None

    def recording(self) -> StepRecord | None:
        """The record an op seen now belongs to, or None when it is not the user's step code."""
        sess = self.session
        if sess is None or self._in_root or self._in_backward or sess.busy or sess.stage is Stage.OPTIMIZER:
            return None
        if self._open and sess.snapshot is not None:
            return sess.snapshot.record
        if self._early.early_rng is None:
            self._early.early_rng = (torch.get_rng_state(), _cuda_rng())
        return self._early

    # ------------------------------------------------------------------ events
    def on_step_begin(self, step: int) -> None:
        assert self.session is not None
        sess = self.session
        if self.rerun_at is not None and step > self.rerun_at and sess.options.get("rerun_stop"):
            sess.options["rerun_stop"](sess)  # the rerun's child: its failing step is done
        self._sync_tape(step)
        snap = StepSnapshot(step=step, rng_cpu=torch.get_rng_state(), rng_cuda=_cuda_rng())
        if sess.options.get("keep_state"):
            # on_step_begin fires before the step's first forward: parameters are still as
            # the previous update left them.
            snap.model_states = {sess.model_label(m) or str(i): clone_state(m) for i, m in enumerate(sess.models)}
            snap.optimizer_states = [clone_optimizer_state(o) for o in sess.optimizers]
        snap.record.taped = self.tape is not None and self.tape.on_stack
        if sess.snapshot is not None:
            # A step that a backward() closed (no optimizer known: Lightning's, one built
            # before watch()) stays open until this forward: the ops run since its last
            # backward are this step's work before its model (a batch normalized in the loop).
            self._early.ops[:0] = sess.snapshot.record.trailing_ops()
        snap.record.adopt(self._early)
        self._early = StepRecord()
        self._open, self._in_root, self._in_backward = True, 0, False
        sess.snapshot = snap

    def on_root_forward_pre(self, model: nn.Module, label: str) -> None:
        self._in_root += 1
        if self._in_root == 1 and self.tape is not None and self.tape.on_stack:
            # The tape records depth-0 ops only: off the stack while the model runs, so the
            # forward's ops (hundreds a step on a small GPT) do not each run its handler.
            self._lifted = self.tape.pop_mode()

    def _lower_tape(self) -> None:
        if self._lifted and self.tape is not None:
            self._lifted = False
            if self.session is not None and self.wants_tape(self.session.step):
                self.tape.push_mode()

    def on_root_forward(self, model: nn.Module, label: str, args: tuple[Any, ...],
                        kwargs: dict[str, Any], output: Any) -> None:
        self._in_root = max(0, self._in_root - 1)
        if not self._in_root:
            self._lower_tape()
        snap = self.session.snapshot if self.session is not None else None
        if snap is None:
            return
        frame = user_frame_from_stack(2)  # the user's line that called the model
        call = snap.record.add_call(model, label, args, kwargs, frame)
        if snap.record.taped:
            call.output = output  # (only while taped: a replay substitutes it)
        if snap.model is not None:
            return  # the step's first root call is the batch; later calls are other models
        snap.model, snap.model_label, snap.args, snap.kwargs = model, label, args, dict(kwargs)
        snap.call_frame = frame

    def on_backward(self, roots: tuple[torch.Tensor, ...], grads: Any) -> None:
        snap = self.session.snapshot if self.session is not None else None
        if snap is not None and snap.record.taped:
            snap.record.add_backward(roots, grads, user_frame_from_stack(3))
        self._in_backward = True

    def on_optimizer_step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        sess = self.session
        snap = sess.snapshot if sess is not None else None
        if sess is not None and snap is not None and snap.record.taped:
            index = next((i for i, o in enumerate(sess.optimizers) if o is optimizer), None)
            if index is not None:
                snap.record.add_update(index, user_frame_from_stack(3))

    def on_backward_end(self, roots: tuple[torch.Tensor, ...]) -> None:
        self._in_backward = False

    def on_exception(self, exc: BaseException) -> None:
        self._in_root, self._in_backward = 0, False
        self._lower_tape()  # (a forward that raised: no on_root_forward came)

    def on_step_end(self, step: int) -> None:
        self._open = False
        self._in_root, self._in_backward = 0, False
        self._lifted = False  # (_sync_tape puts it back when the next step wants it)
        self._sync_tape(step + 1)

    def on_end(self) -> None:
        self._open = False
        if self.tape is not None:
            self.tape.pop_mode()
        self._early = StepRecord()
