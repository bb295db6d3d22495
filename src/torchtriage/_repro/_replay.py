"""Replay the failing step of a bundle with the user's own model, and say whether the same
finding comes back.

The model (and optimizer) come from the user's code: objects, a factory, or the user's
script (see `_script.py`); everything else comes from the bundle: the state before the
step, the batch, the loss targets and the RNG. The step runs once under a fresh `Session`
with the bundle's checks (or those given), and the result compares the trigger with what
this run found:

  * a finding trigger reproduces when a finding has the same category, code, module, op;
  * an exception trigger reproduces when the replay raises the same exception type.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import _registry
from .._catalogue import msg
from .._errors import BundleError
from .._findings import Finding, Report
from .._params import model_device
from ._bundle import Bundle, ReplayBatch, load_bundle

StepFn = Callable[[nn.Module, "torch.optim.Optimizer | None", ReplayBatch], Any]


@dataclasses.dataclass(frozen=True)
class ReplayResult:
    """The outcome of one replay.

    Attributes:
        reproduced: True when the bundle's trigger came back.
        expected: the trigger's signature (kind, category, code, module, op / exception type).
        matched: the finding that matched (finding triggers), else None.
        exception: "Type: message" when the replayed step raised, else None.
        report: everything the replay's session found.
        notes: what the replay could not take from the bundle (state left out, no loss, ...).
    """

    reproduced: bool
    expected: dict[str, Any]
    matched: Finding | None
    exception: str | None
    report: Report
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        """One paragraph: expected, observed, verdict (the message tests show on failure)."""
        what = _describe_signature(self.expected)
        if self.reproduced:
            head = msg("repro.replay.yes", what=what)
        else:
            seen = [f"{f.code} @ {f.module or '<root>'}" for f in self.report.findings] or ["-"]
            head = msg("repro.replay.no", what=what, seen=", ".join(seen), exc=self.exception or "-")
        return "\n".join([head, *self.notes])


def _describe_signature(sig: dict[str, Any]) -> str:
    if sig.get("kind") == "exception":
        return f"{sig.get('type')}: {str(sig.get('message', ''))[:200]}"
    return f"{sig.get('category')}/{sig.get('code')} module={sig.get('module')!r} op={sig.get('op')!r}"


def signature(bundle: Bundle) -> dict[str, Any]:
    t = bundle.trigger
    if t.get("kind") == "exception":
        return {"kind": "exception", "type": t.get("type"), "message": t.get("message")}
    return {"kind": "finding", **{k: t.get(k) for k in ("category", "code", "module", "op")}}


def matches(sig: dict[str, Any], report: Report, exc: BaseException | None) -> Finding | None | bool:
    if sig.get("kind") == "exception":
        return exc is not None and type(exc).__name__ == sig.get("type")
    for f in report.findings:
        if (f.category.value, f.code, f.module, f.op) == (sig.get("category"), sig.get("code"),
                                                         sig.get("module"), sig.get("op")):
            return f
    return None


def resolve_checks(bundle: Bundle, checks: Any) -> tuple[Any, list[str]]:
    """The checks to replay with: given ones, else the bundle's registered checks."""
    if checks is not None:
        return checks, []
    recorded = [n for n in bundle.meta.get("checks", []) if n in _registry.CHECKS and n != "repro"]
    names = [n for n in recorded if n in _registry.available()] or "default"
    notes = []
    custom = bundle.meta.get("custom_checks") or []
    if custom:
        notes.append(msg("repro.note.custom_checks", names=", ".join(custom)))
    return names, notes


def apply_state(bundle: Bundle, model: nn.Module, optimizer: torch.optim.Optimizer | None) -> list[str]:
    """Load the bundle's pre-step state into `model` / `optimizer`; BundleError on mismatch."""
    notes: list[str] = []
    expected_cls = bundle.meta.get("model", {}).get("class")
    state = bundle.model_state()
    if state is None:
        notes.append(msg("repro.note.no_model_state"))
    else:
        own = model.state_dict()
        missing = [k for k in own if k not in state]
        extra = [k for k in state if k not in own]
        shapes = [f"{k} bundle {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
                  for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
        if missing or extra or shapes:
            parts = []
            if missing:
                parts.append(msg("repro.mismatch.missing", keys=_few(missing)))
            if extra:
                parts.append(msg("repro.mismatch.extra", keys=_few(extra)))
            if shapes:
                parts.append(msg("repro.mismatch.shape", keys=_few(shapes)))
            path = os.path.join(bundle.path, "model.safetensors")
            raise BundleError(msg("repro.mismatch", got=type(model).__name__, expected=expected_cls,
                                  details="; ".join(parts)), path)
        with torch.no_grad():
            model.load_state_dict({k: v.to(device=own[k].device, dtype=own[k].dtype) for k, v in state.items()})
    if "training" in bundle.meta.get("model", {}):
        model.train(bool(bundle.meta["model"]["training"]))
    if optimizer is not None:
        ostate = bundle.optimizer_state(0)
        if ostate is None:
            notes.append(msg("repro.note.no_optimizer_state"))
        else:
            want = (bundle.meta.get("optimizers") or [{}])[0].get("class")
            path = os.path.join(bundle.path, "optimizer.safetensors")
            if want and want != type(optimizer).__name__:
                raise BundleError(msg("repro.mismatch.optimizer", got=type(optimizer).__name__,
                                      expected=want, error="class differs"), path)
            try:
                optimizer.load_state_dict(ostate)
            except (ValueError, KeyError, RuntimeError) as e:
                raise BundleError(msg("repro.mismatch.optimizer", got=type(optimizer).__name__,
                                      expected=want, error=str(e)), path) from None
    return notes


def _few(items: list[str], n: int = 4) -> str:
    return ", ".join(items[:n]) + (f" (+{len(items) - n} more)" if len(items) > n else "")


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
    if isinstance(obj, dict) and isinstance(obj.get("model"), nn.Module):
        return dict(obj)
    raise TypeError(msg("repro.factory_result", where=where, got=type(obj).__name__))


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
        from ._script import replay_script

        return replay_script(bundle, os.fspath(script), script_args, checks)
    if factory is not None:
        got = unpack_factory_result(factory(), getattr(factory, "__name__", "factory"))
        model, optimizer = got["model"], got.get("optimizer")
        step_fn = step_fn or got.get("step_fn")
        checks = checks if checks is not None else got.get("checks")
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


def make_result(bundle: Bundle, report: Report, exc: BaseException | None, notes: list[str]) -> ReplayResult:
    sig = signature(bundle)
    m = matches(sig, report, exc)
    return ReplayResult(
        reproduced=bool(m), expected=sig, matched=m if isinstance(m, Finding) else None,
        exception=None if exc is None else f"{type(exc).__name__}: {str(exc)[:500]}",
        report=report, notes=tuple(notes))
