"""What was running when an exception was raised, read from its traceback.

The innermost frame whose local `self` is an `nn.Module` is the module that was running
(innermost wins: a `Linear` inside a user `Block` is named, not the `Block`). Its inputs are
the arguments of that call (the `_call_impl` frame's `args`/`kwargs`, else the arguments of
its `forward`), its parameters are its own (or, for a container, its first few). The stage is
read from the frames too (autograd → backward, torch.optim → optimizer, a loss function →
loss, a module → forward, torch.utils.data → data), falling back on the session's clock.
Only the report path runs this: summaries read tensor values.
"""

from __future__ import annotations

import os
import types
import warnings
from typing import Any

import torch
import torch.nn as nn

from .._findings import Stage
from .._frames import UserFrame, iter_tb, user_frame_from_tb, user_stacklevel
from ._operands import Operand, Sites, operands_of, sites_of

_TORCH = os.path.dirname(os.path.abspath(torch.__file__))
_AUTOGRAD = (os.path.join(_TORCH, "autograd") + os.sep, os.path.join(_TORCH, "_tensor.py"))
_OPTIM = os.path.join(_TORCH, "optim") + os.sep
_DATA = os.path.join(_TORCH, "utils", "data") + os.sep
_FUNCTIONAL = os.path.join(_TORCH, "nn", "functional.py")
MAX_INPUTS = 4
MAX_PARAMS = 6


def _loss_names() -> frozenset[str]:
    from .._checker import LOSS_FUNCTIONS

    return frozenset(LOSS_FUNCTIONS)


class Context:
    """The facts a rule and a message can use about one exception."""

    def __init__(self, exc: BaseException, session: Any = None) -> None:
        self.exc = exc
        self.session = session
        frames = list(iter_tb(exc.__traceback__))
        self.frames = frames
        self.user_frame: UserFrame | None = user_frame_from_tb(exc.__traceback__)
        self.module: nn.Module | None = None
        self.module_frame: types.FrameType | None = None
        self.loss_function: str | None = None
        stage: Stage | None = None
        for f, _ in reversed(frames):  # innermost first
            fn = os.path.abspath(f.f_code.co_filename)
            name = f.f_code.co_name
            if stage is None:
                stage = _stage_of(fn, name, f)
            if self.loss_function is None and fn == _FUNCTIONAL and name in _loss_names():
                self.loss_function = name
            if self.module is None:
                obj = f.f_locals.get("self")
                if isinstance(obj, nn.Module):
                    self.module, self.module_frame = obj, f
        if stage is None and session is not None:
            stage = session.stage
        self.stage = stage
        self._sites: Sites | None = None
        self._operands: list[Operand] | None = None

    # ---------------------------------------------------------------- the failing call
    @property
    def sites(self) -> Sites:
        """The innermost call and the user's failing call (issue 12), read once."""
        if self._sites is None:
            try:
                self._sites = sites_of(self.exc.__traceback__)
            except Exception as e:  # our bug must not hide the report
                _internal("triage.sites", e)
                self._sites = Sites(None, None)
        return self._sites

    @property
    def operands(self) -> list[Operand]:
        """The failing calls' tensors, then the running module's inputs, with their metadata."""
        if self._operands is None:
            try:
                self._operands = operands_of(self.sites, self.inputs())
            except Exception as e:  # our bug must not hide the report
                _internal("triage.operands", e)
                self._operands = []
        return self._operands

    # ---------------------------------------------------------------- naming
    @property
    def module_path(self) -> str | None:
        if self.module is None:
            return None
        if self.session is not None:
            name = self.session.module_name(self.module)
            if name is not None:
                return name
        return type(self.module).__name__

    @property
    def step(self) -> int | None:
        s = self.session
        if s is None:
            return None
        # Loading the first batch comes before step 0 opens, but it is step 0's data.
        if not s.step_started and self.stage is not Stage.DATA:
            return None
        return int(s.step)

    # ---------------------------------------------------------------- tensors
    def inputs(self) -> list[tuple[str, torch.Tensor]]:
        """The running module's tensor inputs, as (name, tensor)."""
        if self.module is None:
            return []
        out: list[tuple[str, torch.Tensor]] = []
        call = self._call_frame()
        if call is not None:
            args = call.f_locals.get("args") or ()
            kwargs = call.f_locals.get("kwargs") or {}
            items = [(f"input[{i}]", a) for i, a in enumerate(args)] + [(f"input.{k}", v) for k, v in kwargs.items()]
        else:
            f = self.module_frame
            assert f is not None
            code = f.f_code
            names = code.co_varnames[1: code.co_argcount + code.co_kwonlyargcount]
            items = [(f"input.{n}", f.f_locals.get(n)) for n in names]
        for name, value in items:
            if isinstance(value, torch.Tensor):
                out.append((name, value))
            elif isinstance(value, (list, tuple)):
                out.extend((f"{name}[{j}]", v) for j, v in enumerate(value) if isinstance(v, torch.Tensor))
        return out[:MAX_INPUTS]

    def _call_frame(self) -> types.FrameType | None:
        for f, _ in self.frames:
            if f.f_code.co_name == "_call_impl" and f.f_locals.get("self") is self.module:
                return f
        return None

    def parameters(self) -> list[tuple[str, torch.Tensor]]:
        if self.module is None:
            return []
        own: list[tuple[str, torch.Tensor]] = list(self.module.named_parameters(recurse=False))
        own += [(f"buffer {n}", b) for n, b in self.module.named_buffers(recurse=False) if b is not None]
        if not own:
            own = list(self.module.named_parameters())
        return own[:MAX_PARAMS]

    def module_device_clash(self) -> dict[str, str] | None:
        """The running module's parameters sit on one device and an input on another."""
        params = [p for _, p in self.parameters() if isinstance(p, torch.Tensor)]
        if not params:
            return None
        pdev = params[0].device
        for name, t in self.inputs():
            if t.device != pdev:
                return {"input": name, "input_device": str(t.device), "module_device": str(pdev)}
        return None

    def _user_tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Tensors named in the user's failing frame, then the running module's inputs."""
        out: list[tuple[str, torch.Tensor]] = []
        if self.user_frame is not None:
            for f, line in reversed(self.frames):
                if f.f_code.co_filename == self.user_frame.file and line == self.user_frame.line:
                    out += [(k, v) for k, v in f.f_locals.items() if isinstance(v, torch.Tensor)]
                    break
        return out + self.inputs()

    def channels_last_tensor(self) -> str | None:
        """Name of a 4-D channels_last (not plain-contiguous) tensor in the failing frames."""
        for name, t in self._user_tensors():
            if (t.dim() == 4 and not t.is_contiguous()
                    and t.is_contiguous(memory_format=torch.channels_last)):
                return name
        return None

    def noncontiguous_tensor(self) -> tuple[str, torch.Tensor] | None:
        """A non-contiguous tensor named in the user's failing frame (the likely view() target)."""
        for name, t in self._user_tensors():
            if t.layout == torch.strided and not t.is_contiguous():
                return name, t
        return None


def _internal(where: str, e: BaseException) -> None:
    from .._catalogue import msg
    from .._errors import TriageInternalWarning

    warnings.warn(msg("internal.warning", where=where, error=f"{type(e).__name__}: {e}"),
                  TriageInternalWarning, stacklevel=user_stacklevel())


def _stage_of(path: str, name: str, f: types.FrameType) -> Stage | None:
    if name in ("backward", "grad", "_engine_run_backward") and path.startswith(_AUTOGRAD):
        return Stage.BACKWARD
    if path.startswith(_OPTIM):
        return Stage.OPTIMIZER
    if path.startswith(_DATA):
        return Stage.DATA
    if path == _FUNCTIONAL and name in _loss_names():
        return Stage.LOSS
    obj = f.f_locals.get("self")
    if isinstance(obj, nn.modules.loss._Loss):
        return Stage.LOSS
    if isinstance(obj, nn.Module):
        return Stage.FORWARD
    return None
