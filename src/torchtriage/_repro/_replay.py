"""Replay the failing step of a bundle with the user's own model, and say whether the same
finding comes back.

The model (and optimizer) come from the user's code: objects, a factory, or the user's
script (see `_script.py`); everything else comes from the bundle: the state before the
step, the batch, the loss targets and the RNG. The step runs once under a fresh `Session`
with the bundle's checks (or those given), and the result (`_result.py`) compares the trigger
with what this run found.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._catalogue import msg
from .._params import model_device
from ._bundle import Bundle, ReplayBatch, load_bundle
from ._restore import apply_state, resolve_checks
from ._result import ReplayResult, make_result
from ._script import replay_script
from ._stepfactory import replay_program

StepFn = Callable[[nn.Module, "torch.optim.Optimizer | None", ReplayBatch], Any]


def default_step(model: nn.Module, optimizer: torch.optim.Optimizer | None, batch: ReplayBatch) -> Any:
    """forward → the recorded loss (when its input is the model's output) → backward → step."""
    out = model(*batch.args, **batch.kwargs)
    loss = None
    if isinstance(out, torch.Tensor):
        for lc in batch.losses:
            fn = getattr(F, lc["name"], None)
            if fn is not None and lc["target"] is not None and lc["input_shape"] == list(out.shape):
                loss = fn(out, lc["target"], *lc["args"], **lc["kwargs"])
                break
    if loss is None or not loss.requires_grad:
        return out
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if optimizer is not None:
        optimizer.step()
    return loss


def unpack_factory_result(obj: Any, where: str) -> dict[str, Any]:
    """A factory may return a model, (model, optimizer), or a dict with model / optimizer /
    step_fn / checks."""
    if isinstance(obj, nn.Module):
        return {"model": obj}
    if isinstance(obj, (tuple, list)) and obj and isinstance(obj[0], nn.Module):
        return {"model": obj[0], "optimizer": obj[1] if len(obj) > 1 else None}
    if isinstance(obj, dict) and (isinstance(obj.get("model"), nn.Module) or _models_dict(obj.get("models"))):
        return dict(obj)
    raise TypeError(msg("repro.factory_result", where=where, got=type(obj).__name__))


def _models_dict(obj: Any) -> bool:
    return isinstance(obj, dict) and bool(obj) and all(isinstance(m, nn.Module) for m in obj.values())


def replay(
    bundle: Bundle | str | os.PathLike[str],
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    step_fn: StepFn | None = None,
    factory: Callable[[], Any] | None = None,
    script: str | os.PathLike[str] | None = None,
    script_args: list[str] | None = None,
    checks: Any = None,
) -> ReplayResult:
    """Run a bundle's failing step once with your model and say whether it fails the same way.

    Arguments:
        bundle: a `Bundle` or the bundle folder.
        model, optimizer: your model (and optimizer), built by your own code; the bundle's
            pre-step state is loaded into them (a mismatch raises `BundleError`).
        step_fn: `step_fn(model, optimizer, batch)` runs one step; `batch` has `.args`,
            `.kwargs` (the model's inputs) and `.target` / `.losses`. Default: forward, the
            recorded loss, backward, `optimizer.step()`.
        factory: instead of model/optimizer: a callable returning a model, (model, optimizer)
            or a dict with "model", "optimizer", "step_fn", "checks".
        script: instead of a model: run your training script, swapping the bundle's state
            and batch into its first call of the model and stopping after that step.
        checks: the checks to run (default: those the bundle's run used).

    Returns:
        A `ReplayResult` (`.reproduced`, `.describe()`).

    Example:
        >>> result = torchtriage.replay("bundle/", model=Net(), optimizer=opt)
        >>> assert not result.reproduced, result.describe()
    """
    if not isinstance(bundle, Bundle):
        bundle = load_bundle(bundle)
    if script is not None:
        return replay_script(bundle, os.fspath(script), script_args, checks)
    models: dict[str, nn.Module] | None = None
    optimizers: list[Any] | None = None
    if factory is not None:
        got = unpack_factory_result(factory(), getattr(factory, "__name__", "factory"))
        model, optimizer = got.get("model"), got.get("optimizer")
        models, optimizers = got.get("models"), got.get("optimizers")
        step_fn = step_fn or got.get("step_fn")
        checks = checks if checks is not None else got.get("checks")
    program = (bundle.meta.get("batch") or {}).get("step")
    if step_fn is None and program and program.get("events"):
        return replay_program(bundle, program, model, optimizer, models, optimizers, checks)
    if model is None and models:
        model = next(iter(models.values()))
        optimizer = optimizer or (optimizers[0] if optimizers else None)
    if not isinstance(model, nn.Module):
        raise TypeError(msg("repro.need_model", got=type(model).__name__))
    notes = apply_state(bundle, model, optimizer)
    batch = bundle.batch(model_device(model))
    checks, more = resolve_checks(bundle, checks)
    notes += more
    if step_fn is None and not any(lc["target"] is not None for lc in batch.losses):
        notes.append(msg("repro.note.forward_only"))
    from .._session import Session

    bundle.restore_rng()
    session = Session(model, optimizer, on_anomaly="record", checks=checks, report=False)
    exc: BaseException | None = None
    try:
        with session:
            (step_fn or default_step)(model, optimizer, batch)
    except Exception as e:  # the replayed step's own failure is the observation
        exc = e
    return make_result(bundle, session.report, exc, notes)
