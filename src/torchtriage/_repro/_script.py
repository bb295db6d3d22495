"""Replay through the user's own training script (`torchtriage replay BUNDLE --script S`).

The script runs as `python S ARGS` would (runpy, `__main__`), under a discovering session,
and builds its model, optimizer and data as usual. Three interceptions turn its first step
into the bundle's step:

  1. `nn.Module.__call__` (patched for the replay only): the first call of a module whose
     class and state_dict keys equal the bundle's model gets the bundle's pre-step state,
     optimizer state and RNG, and its arguments are replaced by the bundle's batch (args and
     kwargs; a forward pre-hook could not replace kwargs).
  2. the `torch.nn.functional` losses: within that step, the i-th loss call of the recorded
     name gets the recorded target; and every other recorded input of the step (the target of
     a hand-written loss, a mask, a weight: `batch.inputs`) replaces the script's tensor of the
     same shape where it entered the step (same op, same line), through a pass-through
     TorchFunctionMode on for that step only (issue 11).
  3. once the session's step clock moves past that step (after `optimizer.step()`, or after
     backward when no optimizer exists), the script is stopped by a private exception.

An exception raised inside the step is the replay's observation. A script that never calls
a matching model is a `BundleError` naming the class the bundle expects.
"""

from __future__ import annotations

import functools
import os
import runpy
import sys
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import optimizer as _optim_mod
from torch.overrides import TorchFunctionMode

from .._catalogue import msg
from .._errors import BundleError
from .._frames import trims_errors, user_frame_from_stack
from .._modestack import push_mode, remove_mode
from .._params import model_device
from .._patching import Patches, wrapper
from .._step import op_name
from ._bundle import Bundle
from ._restore import apply_state, resolve_checks
from ._result import ReplayResult, make_result


class _StopReplay(BaseException):
    """Raised into the script once the replayed step is done (not an Exception on purpose:
    a script's `except Exception` must not swallow it)."""


class _Injector:
    def __init__(self, bundle: Bundle, session: Any) -> None:
        self.bundle = bundle
        self.session = session
        model_meta = bundle.meta.get("model", {})
        self.cls = model_meta.get("class")
        state = bundle.model_state()
        self.keys = set(state) if state is not None else None
        self.model: nn.Module | None = None
        self.optimizer_pending = bundle.optimizer_state(0) is not None
        self.start_step = 0
        self.loss_index = 0
        self.targets: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self._patches = Patches()
        self._handles: list[Any] = []
        self._swap: Any = None
        self.inputs: list[dict[str, Any]] = []

    # -------------------------------------------------------------- install / remove
    def install(self) -> None:
        patch = self._patches.patch
        patch(nn.Module, "__call__", wrapper(nn.Module.__call__, self._call))
        for lc in self.bundle.meta.get("batch", {}).get("losses", []):
            fn = getattr(F, lc["name"], None)
            if fn is not None and not self._patches.patched(F, lc["name"]):
                patch(F, lc["name"], wrapper(fn, functools.partial(self._loss, lc["name"])))
        self._handles.append(_optim_mod.register_optimizer_step_pre_hook(self._opt_pre))
        self._handles.append(_optim_mod.register_optimizer_step_post_hook(self._opt_post))
        patch(torch.autograd, "backward", wrapper(torch.autograd.backward, self._backward))
        if self.bundle.meta.get("batch", {}).get("inputs"):
            self._swap = _InputSwap(self)
            push_mode(self._swap)

    def uninstall(self) -> None:
        swap, self._swap = self._swap, None
        if swap is not None:
            remove_mode(swap)  # by identity: other modes may sit above it by now
        for h in self._handles:
            h.remove()
        self._patches.restore_all()
        self._handles.clear()

    # -------------------------------------------------------------- interceptions
    def matches(self, module: nn.Module) -> bool:
        if type(module).__name__ != self.cls:
            return False
        return self.keys is None or set(module.state_dict()) == self.keys

    def done(self) -> bool:
        return self.model is not None and self.session.step > self.start_step

    def _call(self, original: Any, module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        """`nn.Module.__call__`: the bundle's state and batch at the matching model's first call."""
        if self.model is None and self.matches(module):
            self.inject(module)
            batch = self.bundle.batch(model_device(module))
            args, kwargs = batch.args, batch.kwargs
            self.targets = batch.losses
            self.inputs = batch.inputs
        elif module is self.model and self.done():
            raise _StopReplay
        return original(module, *args, **kwargs)

    def inject(self, module: nn.Module) -> None:
        self.model = module
        self.start_step = self.session.step
        optimizer = self._optimizer_for(module)
        self.notes += apply_state(self.bundle, module, optimizer)
        if optimizer is not None:
            self.optimizer_pending = False
        self.bundle.restore_rng()

    def _optimizer_for(self, module: nn.Module) -> torch.optim.Optimizer | None:
        params = {id(p) for p in module.parameters()}
        for opt in self.session.optimizers:
            if any(id(p) in params for g in opt.param_groups for p in g["params"]):
                return opt
        return None

    def _loss(self, name: str, original: Any, *args: Any, **kwargs: Any) -> Any:
        """`F.<name>`: the i-th call of the replayed step gets the recorded target."""
        if self.model is not None and not self.done():
            recorded = [lc for lc in self.targets if lc["name"] == name]
            i = self.loss_index
            if i < len(recorded) and recorded[i]["target"] is not None:
                self.loss_index += 1
                if len(args) > 1:
                    args = (args[0], recorded[i]["target"], *args[2:])
                else:
                    kwargs["target"] = recorded[i]["target"]
        return original(*args, **kwargs)

    def _opt_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.model is not None and self.optimizer_pending and not self.done():
            if self._optimizer_for(self.model) is optimizer:
                self.optimizer_pending = False
                apply_state(self.bundle, self.model, optimizer)

    def _opt_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.done():
            raise _StopReplay

    def _backward(self, original: Any, *args: Any, **kwargs: Any) -> Any:
        """`torch.autograd.backward`: without an optimizer, the step ends after it."""
        out = original(*args, **kwargs)
        if self.done() and not self.session.optimizers:
            raise _StopReplay
        return out


def replay_script(bundle: Bundle, script: str, script_args: list[str] | None, checks: Any) -> ReplayResult:
    if not os.path.isfile(script):
        raise BundleError(msg("repro.no_script", script=script), script)
    if script_args is None:
        recorded = bundle.meta.get("command", {}).get("argv") or []
        script_args = list(recorded[1:])
    from .._distributed._replay import single_process

    checks, notes = resolve_checks(bundle, checks)
    with single_process(bundle) as dist_notes:  # a rank's bundle: a one-rank process group
        result = _replay_script(bundle, script, script_args, checks, notes + dist_notes)
    return result


def _replay_script(bundle: Bundle, script: str, script_args: list[str], checks: Any,
                   notes: list[str]) -> ReplayResult:
    from .._session import Session

    session = Session(discover=True, on_anomaly="record", checks=checks, report=False,
                      script=os.path.abspath(script))
    inj = _Injector(bundle, session)
    old_argv, old_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = [script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    exc: BaseException | None = None
    try:
        with session:
            inj.install()
            try:
                # absolute, as `python S` names __main__'s file: the bundle's input lines name it so
                runpy.run_path(os.path.abspath(script), run_name="__main__")
            except _StopReplay:
                pass
            except SystemExit:
                pass
            except BundleError:
                raise  # the bundle does not fit the script's model: bad input, not an observation
            except Exception as e:  # the replayed step's failure is the observation
                exc = e
                session.handle_exception(e)
            finally:
                inj.uninstall()
    finally:
        sys.argv = old_argv
        sys.path.pop(0)
        if old_path0 is not None and sys.path and sys.path[0] != old_path0:
            sys.path[0] = old_path0
    if inj.model is None:
        why = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
        raise BundleError(msg("repro.no_model_called", script=script, cls=inj.cls) + why, script)
    return make_result(bundle, session.report, exc, notes + inj.notes)


class _InputSwap(TorchFunctionMode):
    """During the replayed step: a recorded input of the step (e.g. `y` in `pred - y`) replaces
    the script's tensor where it entered (same op name and user line, same original shape)."""

    def __init__(self, injector: _Injector) -> None:
        super().__init__()
        self.inj = injector
        # script tensor id -> (that tensor, its replacement): the recorder names each input once,
        # where it first entered the step (`target` in `pred - target`); its later uses in the
        # step (`/ target` on the same line or another) get the same replacement (issue 27)
        self.swapped: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    @trims_errors
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        inj = self.inj
        if inj.inputs and inj.model is not None and not inj.done():
            try:
                args, kwargs = self._swap(func, args, kwargs)
            except Exception:  # a replay aid: never break the script's op
                pass
        return func(*args, **kwargs)

    def _swap(self, func: Any, args: Any, kwargs: Any) -> tuple[Any, Any]:
        swapped = self.swapped
        frame = user_frame_from_stack(3)
        here = []
        if frame is not None:
            name = op_name(func)
            here = [e for e in self.inj.inputs if e["where"] == name and e["line"] == frame.line
                    and _same_file(e["file"], frame.file)]
        if not here and not swapped:
            return args, kwargs

        def sub(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                known = swapped.get(id(x))
                if known is not None and known[0] is x:
                    return known[1]
                for e in here:
                    if list(x.shape) == e["shape"] and str(x.dtype) == e["dtype"]:
                        swapped[id(x)] = (x, e["tensor"].to(x.device))
                        return swapped[id(x)][1]
            return x

        return tuple(sub(a) for a in args), {k: sub(v) for k, v in kwargs.items()}


@functools.lru_cache(maxsize=256)
def _same_file(recorded: str, seen: str) -> bool:
    """The bundle's file of an input and the replay's frame file name the same file (a watched
    script run as `python train.py` records it absolute; a symlinked folder, the real path)."""
    return recorded == seen or os.path.realpath(recorded) == os.path.realpath(seen)
