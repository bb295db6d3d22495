"""Factory replay of the whole step (issue 11): the bundle's step program (`_program.py`) run
with the user's models and optimizers — every model call (a GAN's G and D, a teacher and a
student), the hand-written loss and metrics as the tape recorded them, with the step's
external inputs (targets, masks) from the bundle, the backward calls and the updates.

The factory returns `{"models": {"G": G, "netD": netD}, "optimizers": [optD, optG]}` (labels
as the bundle names them: the user's variables; optimizers in the recorded order), or one model
(and optimizer) when the step called one model.
"""

from __future__ import annotations

from typing import Any

import torch.nn as nn

from .._catalogue import msg
from .._errors import BundleError
from .._params import model_device
from ._bundle import Bundle
from ._program import StepReplay
from ._restore import apply_optimizer_state, apply_state, resolve_checks
from ._result import ReplayResult, make_result


def _labels(program: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    for ev in program["events"]:
        if ev["kind"] == "call" and ev["model"] not in seen:
            seen.append(ev["model"])
    return seen


def replay_program(bundle: Bundle, program: dict[str, Any], model: nn.Module | None, optimizer: Any,
                   models: dict[str, nn.Module] | None, optimizers: list[Any] | None,
                   checks: Any) -> ReplayResult:
    labels = _labels(program)
    if models is None:
        if not isinstance(model, nn.Module):
            raise TypeError(msg("repro.need_model", got=type(model).__name__))
        if len(labels) > 1:
            raise BundleError(msg("repro.step.models", labels=", ".join(labels)), bundle.path)
        models = {labels[0] if labels else "model": model}
    missing = [lab for lab in labels if lab not in models]
    if missing:
        raise BundleError(msg("repro.step.missing_models", missing=", ".join(missing),
                              given=", ".join(models) or "-", labels=", ".join(labels)), bundle.path)
    if optimizers is None:
        optimizers = [optimizer] if optimizer is not None else []
    notes: list[str] = []
    for label, m in models.items():
        notes += [n for n in apply_state(bundle, m, None, label=label) if n not in notes]
    for i, opt in enumerate(optimizers):
        notes += [n for n in apply_optimizer_state(bundle, opt, i) if n not in notes]
    checks, more = resolve_checks(bundle, checks)
    notes += more
    if program.get("left_out"):
        notes.append(msg("repro.note.step_left_out", ops="; ".join(program["left_out"][:4])))
    from .._session import Session

    session = Session(None, optimizers, on_anomaly="record", checks=checks, report=False)
    runner = StepReplay(program, models, optimizers, bundle.tensors.get("batch.safetensors", {}),
                        model_device(next(iter(models.values()))))
    exc: BaseException | None = None
    try:
        with session:
            for label, m in models.items():  # each model under the label the bundle gives it
                session.watch_model(m, label)
            bundle.restore_rng()
            runner.run()
    except Exception as e:  # the replayed step's own failure is the observation
        exc = e
    return make_result(bundle, session.report, exc, notes)
