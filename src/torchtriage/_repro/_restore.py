"""The replayed step's set-up, shared by every way to replay (objects, factory, script): the
bundle's pre-step state loaded into the user's model and optimizer, and the checks to run."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn as nn

from .. import _registry
from .._catalogue import msg
from .._errors import BundleError
from ._bundle import Bundle


def resolve_checks(bundle: Bundle, checks: Any) -> tuple[Any, list[str]]:
    """The checks to replay with: given ones, else the bundle's registered checks."""
    if checks is not None:
        return checks, []
    recorded = [n for n in bundle.meta.get("checks", []) if n in _registry.CHECKS and n != "repro"]
    names: list[str] | str = [n for n in recorded if n in _registry.available()] or "default"
    notes: list[str] = []
    custom = bundle.meta.get("custom_checks") or []
    if custom:
        notes.append(msg("repro.note.custom_checks", names=", ".join(custom)))
    return names, notes


def apply_state(bundle: Bundle, model: nn.Module, optimizer: torch.optim.Optimizer | None,
                *, label: str | None = None, opt_index: int = 0) -> list[str]:
    """Load the bundle's pre-step state into `model` / `optimizer` (the model recorded as
    `label`, default the failing one; the optimizer at `opt_index`); BundleError on mismatch."""
    notes: list[str] = []
    expected_cls = bundle.meta.get("model", {}).get("class")
    if label is not None:
        expected_cls = next((m.get("class") for m in bundle.meta.get("models", []) if m["label"] == label),
                            expected_cls)
    state = bundle.model_state(label)
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
    if "training" in bundle.meta.get("model", {}) and label is None:
        model.train(bool(bundle.meta["model"]["training"]))
    if optimizer is not None:
        notes += apply_optimizer_state(bundle, optimizer, opt_index)
    return notes


def apply_optimizer_state(bundle: Bundle, optimizer: torch.optim.Optimizer, opt_index: int = 0) -> list[str]:
    """Load the state of the bundle's optimizer at `opt_index` (the recorded order) into `optimizer`."""
    notes: list[str] = []
    ostate = bundle.optimizer_state(opt_index)
    if ostate is None:
        notes.append(msg("repro.note.no_optimizer_state"))
    else:
        want = ((bundle.meta.get("optimizers") or [])[opt_index:opt_index + 1] or [{}])[0].get("class")
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
