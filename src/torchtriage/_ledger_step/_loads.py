"""A `load_state_dict(strict=False)` that sets few or none of the model's parameters (session 8).

`strict=False` turns every key mismatch into two lists the call returns and most code drops:
`missing_keys` (the model's entries the state dict did not set: they keep their initialization)
and `unexpected_keys` (the state dict's entries the model has no place for). A checkpoint saved
from a `DataParallel` / DDP wrapper ("module." keys) loaded into the bare model, or a wrapper's
keys ("model.", "backbone.") loaded into the inner model, matches nothing: the load returns,
and the model predicts or trains from random weights.

At every outermost `Module.load_state_dict(..., strict=False)` the result is measured: how many
of the module's parameters the call set. A finding when

  * it set none of them while the state dict held tensors (`nothing`); or
  * it set fewer than half of them and the unexpected keys are the missing ones under another
    prefix, with the same shapes (`prefix`): the weights were in the state dict, under names
    the model does not use.

A partial load that is the point of `strict=False` stays quiet: a pretrained backbone loaded
into a model with a new head (the head's keys are missing, the old head's unexpected), a
checkpoint with extra entries (an EMA copy, a discriminator), or a few renamed buffers.
Severity `error`: the parameters the call was given keep their random values, measured on the
call's own return value.

A strict load (the default) that raises on the same mismatch gets the `prefix` diagnosis too
(variant `raised`), the keys compared here: PyTorch's error lists the missing and unexpected
keys, not that they are the same weights under a wrapper's prefix ('module.' of
DistributedDataParallel / DataParallel, '_orig_mod.' of torch.compile).
Cost: one pass over the keys, once per load (not a hot path).
"""

from __future__ import annotations

import collections
import types
from collections.abc import Mapping
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import user_frame_from_stack

MAX_LOADED_SHARE = 0.5  # a prefix mismatch matters when the call set fewer than this share


def _prefix_map(missing: list[str], unexpected: list[str]) -> tuple[str, str, int]:
    """The most common (strip, add) prefix pair that turns unexpected keys into missing ones,
    and how many it maps: ("module.", "", n) when the state dict's keys carry "module."."""
    wanted = set(missing)
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for u in unexpected:
        parts = u.split(".")
        for i in range(1, min(len(parts), 4)):
            if ".".join(parts[i:]) in wanted:  # the state dict's key carries an extra prefix
                counts[(".".join(parts[:i]) + ".", "")] += 1
    by_tail: dict[str, list[str]] = {}
    for m in missing:
        parts = m.split(".")
        for i in range(1, min(len(parts), 4)):
            by_tail.setdefault(".".join(parts[i:]), []).append(".".join(parts[:i]) + ".")
    for u in unexpected:
        for pre in by_tail.get(u, ()):  # the model's keys carry a prefix the state dict lacks
            counts[("", pre)] += 1
    if not counts:
        return "", "", 0
    (strip, add), n = counts.most_common(1)[0]
    return strip, add, n


def judge_load(module: torch.nn.Module, state_dict: Mapping[str, Any], result: Any) -> dict[str, Any] | None:
    """The evidence of a load that set few or none of `module`'s parameters, else None."""
    missing = list(getattr(result, "missing_keys", []) or [])
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if not missing:
        return None
    params = dict(module.named_parameters())
    if not params:
        return None
    missing_params = [k for k in missing if k in params]
    loaded = len(params) - len(missing_params)
    if loaded >= MAX_LOADED_SHARE * len(params):
        return None
    tensors = [k for k, v in state_dict.items() if isinstance(v, torch.Tensor)]
    if not tensors:
        return None
    strip, add, mapped = _prefix_map(missing_params, unexpected)
    shapes_agree = 0
    if mapped:
        for u in unexpected:
            if strip and not u.startswith(strip):
                continue
            name = add + u[len(strip):]
            v = state_dict.get(u)
            if name in params and isinstance(v, torch.Tensor) and tuple(v.shape) == tuple(params[name].shape):
                shapes_agree += 1
    prefix = shapes_agree >= max(1, len(missing_params) // 2)
    if loaded and not prefix:
        return None
    return {"parameters": len(params), "parameters_loaded": loaded,
            "missing_keys": len(missing), "unexpected_keys": len(unexpected),
            "missing_examples": missing_params[:3], "unexpected_examples": unexpected[:3],
            "state_dict_tensors": len(tensors), "prefix_in_state_dict": strip if prefix else None,
            "prefix_in_model": add if prefix else None, "keys_the_prefix_fixes": shapes_agree if prefix else 0}


class LoadWatch:
    """Wraps `nn.Module.load_state_dict` for the session (restored on exit)."""

    def __init__(self, session: Any, snapshots: Any = None, origins: Any = None, checkpoints: Any = None) -> None:
        self.session = session
        self.snapshots = snapshots  # `_selfload.Snapshots`: a reference snapshot restored onto itself
        self.origins = origins  # `_origins.Origins`: weights still mostly the trained model's initialization
        self.checkpoints = checkpoints  # `_resume.CheckpointWatch`: does the load take what torch.load read
        self.depth = 0
        self.reported: set[tuple[str | None, int | None]] = set()

    def install(self) -> None:
        original = torch.nn.Module.load_state_dict
        watch = self

        def load_state_dict(self: torch.nn.Module, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            strict = kwargs.get("strict", args[0] if args else True)
            if watch.depth == 0 and watch.snapshots is not None and not watch.session.busy \
                    and isinstance(state_dict, Mapping):
                try:  # before the copy: it writes the weights onto themselves
                    f = watch.snapshots.judge(self, state_dict)
                    if f is None and watch.origins is not None:
                        f = watch.origins.judge(self, state_dict)
                    if f is not None:
                        watch.session.add(f)
                    if watch.checkpoints is not None:
                        watch.checkpoints.module_load(self, state_dict)
                except Exception as e:  # our bug: the user's load happens regardless
                    watch.session.internal_error("step_ledger.load_state_dict", e)
            watch.depth += 1
            try:
                result = original(self, state_dict, *args, **kwargs)
            except RuntimeError:
                if watch.depth == 1 and strict and not watch.session.busy and isinstance(state_dict, Mapping):
                    watch.refused(self, state_dict)
                raise
            finally:
                watch.depth -= 1
            if watch.depth == 0 and not strict and not watch.session.busy and isinstance(state_dict, Mapping):
                try:
                    f = watch.judge(self, state_dict, result)
                    if f is not None:
                        watch.session.add(f)
                except Exception as e:  # our bug: the user's load has happened regardless
                    watch.session.internal_error("step_ledger.load_state_dict", e)
            return result

        load_state_dict.__wrapped__ = original  # type: ignore[attr-defined]
        self.session.patch(torch.nn.Module, "load_state_dict", load_state_dict)

    def refused(self, module: torch.nn.Module, state_dict: Mapping[str, Any]) -> None:
        """A strict load that raised: when the keys differ by a wrapper's prefix, say which (the
        error lists the keys but not that they are the same weights under another name)."""
        try:
            own = module.state_dict().keys()
            result = types.SimpleNamespace(missing_keys=[k for k in own if k not in state_dict],
                                           unexpected_keys=[k for k in state_dict if k not in own])
            f = self.judge(module, state_dict, result, raised=True)
            if f is not None:
                self.session.add(f)
        except Exception as e:  # our bug: the user's exception goes on regardless
            self.session.internal_error("step_ledger.load_state_dict", e)

    def judge(self, module: torch.nn.Module, state_dict: Mapping[str, Any], result: Any,
              raised: bool = False) -> Finding | None:
        ev = judge_load(module, state_dict, result)
        if ev is None or (raised and ev["prefix_in_state_dict"] is None):
            return None  # a strict load with no prefix to name: the exception says it all
        frame = user_frame_from_stack(3)
        key = (frame.file if frame else None, frame.line if frame else None)
        if key in self.reported:
            return None
        self.reported.add(key)
        name = type(module).__name__
        prefix = ev["prefix_in_state_dict"] is not None
        fields = {"model": name, "loaded": ev["parameters_loaded"], "total": ev["parameters"],
                  "missing": ev["missing_keys"], "unexpected": ev["unexpected_keys"],
                  "example": ev["unexpected_examples"][0] if ev["unexpected_examples"] else "-",
                  "strip": ev["prefix_in_state_dict"] or "", "add": ev["prefix_in_model"] or "",
                  "fixes": ev["keys_the_prefix_fixes"]}
        variant = "raised" if raised else "prefix" if prefix else "nothing"
        ev["raised"] = raised
        return from_catalogue(Category.OTHER, "checkpoint.not_loaded", f"loads.not_loaded.{variant}",
                              fields=fields, cause_key=f"loads.not_loaded.cause.{variant}",
                              next_key=f"loads.not_loaded.next.{variant}", frame=frame, evidence=ev,
                              source_line=True, severity=Severity.ERROR, stage=Stage.PARAMETER,
                              module=name, op="load_state_dict")
