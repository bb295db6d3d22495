"""An optimizer whose `load_state_dict` raised, and that trained on with a fresh state (session 17).

The invariant: after an optimizer's state is restored, the optimizer holds that state. A resume
that hands an optimizer the state dict of another one (two optimizers' files swapped, a text
encoder's state loaded into the UNet's optimizer) makes `Optimizer.load_state_dict` raise
("loaded state dict contains a parameter group that doesn't match the size of optimizer's
group"); code that catches the exception to log it (`except Exception: logging.warning(...)`)
goes on with an optimizer that has no state at all: Adam's moments and step count restart from
zero, and the run is not the resumed one it reports.

The wrapper on `Optimizer.load_state_dict` (`_resume.CheckpointWatch`) notes a call that raised:
the optimizer, the exception, how many per-parameter states the dict held and the user's lines.
The optimizer's later steps are counted; at the end, one that stepped `MIN_STEPS` times or more
after the failed load is the finding: a warning (the state the checkpoint held, measured in the
dict, never reached it; it trained on from an empty one). Attributes only.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Mapping
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack

MIN_STEPS = 3


class _Failed:
    def __init__(self, opt: torch.optim.Optimizer, held: int, error: str, frame: UserFrame | None,
                 outer: UserFrame | None, step: int) -> None:
        self.ref = weakref.ref(opt)
        self.kind = type(opt).__name__
        self.held = held  # per-parameter states in the dict
        self.error = error
        self.frame = frame
        self.outer = outer
        self.step = step
        self.states_at_failure = len(opt.state)
        self.params = sum(len(g["params"]) for g in opt.param_groups)
        self.steps = 0


class FailedLoads:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.failed: dict[int, _Failed] = {}

    def raised(self, opt: torch.optim.Optimizer, state_dict: Any, exc: BaseException) -> None:
        if len(self.failed) >= 16:
            return
        state = state_dict.get("state") if isinstance(state_dict, Mapping) else None
        held = len(state) if isinstance(state, Mapping) else 0
        frame = user_frame_from_stack(3)  # the user's load_state_dict line (`called_from`: its caller)
        outer = None
        if frame is not None:
            f: Any = sys._getframe(1)
            seen = 0
            while f is not None:
                if f.f_code.co_filename == frame.file and f.f_lineno == frame.line:
                    seen = 1
                elif seen and f.f_code.co_filename == frame.file:
                    outer = UserFrame(f.f_code.co_filename, f.f_lineno, f.f_code.co_name, "")
                    break
                f = f.f_back
        self.failed[id(opt)] = _Failed(opt, held, f"{type(exc).__name__}: {exc}"[:200], frame, outer,
                                       self.session.step)

    def loaded(self, opt: torch.optim.Optimizer) -> None:
        self.failed.pop(id(opt), None)  # a later load that worked

    def stepped(self, opt: torch.optim.Optimizer) -> None:
        f = self.failed.get(id(opt))
        if f is not None and f.ref() is opt:
            f.steps += 1

    def end(self) -> list[Finding]:
        out = []
        for f in self.failed.values():
            if f.steps < MIN_STEPS or not f.held or f.states_at_failure:
                continue  # (a failed load into an optimizer that already had a state keeps that one)
            steps = max(f.steps, self.session.step - f.step)
            outer = f"{f.outer.file.rsplit('/', 1)[-1]}:{f.outer.line}" if f.outer is not None else None
            evidence: dict[str, Any] = {
                "optimizer": f.kind, "error": f.error, "states_in_loaded_dict": f.held,
                "optimizer_parameters": f.params, "states_after_load": 0, "steps_after_load": steps,
                "called_from": outer,
                "harm": f"the {f.held} per-parameter states of the loaded dict never reached {f.kind}: it took "
                        f"{steps} steps from an empty state"}
            fields = {"opt": f.kind, "held": f.held, "n": f.params, "steps": steps, "error": f.error}
            out.append(from_catalogue(
                Category.OTHER, "other.optimizer_load_failed", "ledger.optimizer_load_failed", fields=fields,
                cause_key="ledger.optimizer_load_failed.cause", next_key="ledger.optimizer_load_failed.next",
                frame=f.frame, source_line=f.frame is not None, evidence=evidence, severity=Severity.WARNING,
                stage=Stage.OPTIMIZER, step=f.step, op="load_state_dict"))
        self.failed.clear()
        return out
