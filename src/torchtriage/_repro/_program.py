"""The failing step as data (issue 11): every model call, the ops of the hand-written loss and
metrics, the backward calls and optimizer updates, in order, so a factory replay runs the whole
step and not only a `torch.nn.functional` loss.

A bundle holds no pickle, so the step tape (`_step.StepRecord`) is stored as JSON in
`meta.json` (`step`): each event names its op by a torch namespace path (`torch.sqrt`,
`torch.Tensor.__sub__`, `torch.nn.functional.mse_loss`, `getattr:T` for a property read) and
its arguments as a tree whose tensors are references:

    {"t": "ref", "id": 3}                      the 3rd tensor the step itself produced
    {"t": "param", "model": "netD", "name": "0.weight"}   a model's parameter (or "buffer")
    {"t": "param", "opt": 0, "group": 0, "index": 1}      a raw tensor an optimizer holds
    {"t": "tensor", "key": "args.0"}           a tensor from outside the step, in batch.safetensors

so `Bundle.select` slices every per-sample tensor of the step together. Replaying resolves a
name only by attribute lookups in those torch namespaces (nothing is imported or evaluated),
and runs each call under a frame that carries the recorded file and line, so a finding of the
replay names the user's line, as the run did.

Not stored (the step tape stores the op's result instead, and `left_out` names it): an op
whose arguments are not plain data (a `torch.Generator`, a user object), an op outside those
namespaces, ops run before the step's first model call (their results: the batch as the step
saw it); `zero_grad` is not recorded (the replay starts with no gradients). A step whose tape
was off or overflowed has no program; the replay then runs the recorded functional loss.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._safetensors import supported
from ._tree import encode_scalar

_NAMESPACES: dict[str, Any] = {
    "torch": torch, "torch.Tensor": torch.Tensor, "torch.nn.functional": F, "torch.linalg": torch.linalg,
    "torch.special": torch.special, "torch.fft": torch.fft,
}
MAX_EVENTS = 4096


class _NotData(Exception):
    pass


def _leaves(obj: Any, depth: int = 0) -> list[Any]:
    """The values of an output in a fixed order: tensors inside tuples, lists, mappings (a
    `ModelOutput`) and plain objects' attributes; the same walk on the run and on the replay."""
    if isinstance(obj, torch.Tensor) or depth > 4:
        return [obj]
    if isinstance(obj, Mapping):
        return [x for v in obj.values() for x in _leaves(v, depth + 1)]
    if isinstance(obj, (list, tuple)):
        return [x for v in obj for x in _leaves(v, depth + 1)]
    if hasattr(obj, "__dict__") and not isinstance(obj, (nn.Module, type)):
        return [x for v in vars(obj).values() for x in _leaves(v, depth + 1)]
    return [obj]


# ---------------------------------------------------------------------------- names
def op_path(func: Any) -> str | None:
    """`torch.Tensor.__sub__`, `torch.nn.functional.mse_loss`, `getattr:T`; None outside the
    namespaces a replay may look up."""
    name = getattr(func, "__name__", None)
    owner = getattr(func, "__self__", None)
    if name == "__get__" and owner is not None and isinstance(getattr(owner, "__name__", None), str):
        return f"getattr:{owner.__name__}"
    if not isinstance(name, str):
        return None
    inner = getattr(func, "__wrapped__", None)  # the session's loss wrappers
    for path, ns in _NAMESPACES.items():
        found = getattr(ns, name, None)
        if found is not None and (found is func or (inner is not None and found is inner)
                                  or getattr(found, "__wrapped__", None) is func):
            return f"{path}.{name}"
    return None


def resolve(path: str) -> Any:
    """The callable a stored op path names (attribute lookups in torch namespaces only)."""
    if path.startswith("getattr:"):
        attr = path.split(":", 1)[1]
        return lambda t: getattr(t, attr)
    ns, _, name = path.rpartition(".")
    if ns not in _NAMESPACES or not name.isidentifier():
        raise ValueError(f"op {path!r} is not in a torch namespace")
    fn = getattr(_NAMESPACES[ns], name, None)
    if not callable(fn):
        raise ValueError(f"op {path!r} not found in this torch")
    return fn


# ---------------------------------------------------------------------------- encoding
def _tensor_key(t: torch.Tensor) -> tuple[Any, ...]:
    return (t.data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype, str(t.device))


class _Encoder:
    def __init__(self, sess: Any, tensors: dict[str, torch.Tensor]) -> None:
        self.tensors = tensors
        self.known: dict[int, dict[str, Any]] = {}
        for m in sess.models:
            label = sess.model_label(m)
            for n, p in m.named_parameters():
                self.known.setdefault(id(p), {"t": "param", "model": label, "name": n})
            for n, b in m.named_buffers():
                self.known.setdefault(id(b), {"t": "buffer", "model": label, "name": n})
        for oi, opt in enumerate(sess.optimizers):
            for gi, g in enumerate(opt.param_groups):
                for pi, p in enumerate(g["params"]):
                    self.known.setdefault(id(p), {"t": "param", "opt": oi, "group": gi, "index": pi})
        self.stored = {_tensor_key(v): k for k, v in tensors.items()}
        self.produced: dict[int, int] = {}
        self.alive: list[torch.Tensor] = []  # keeps ids unique while encoding

    def external(self, t: torch.Tensor) -> dict[str, Any]:
        if not supported(t):
            raise _NotData(f"Tensor[{t.dtype}, {t.layout}]")
        d = t.detach()
        key = self.stored.get(_tensor_key(d))
        if key is None:
            key = f"step.x{len(self.stored)}"
            while key in self.tensors:
                key += "_"
            self.tensors[key] = d
            self.stored[_tensor_key(d)] = key
        return {"t": "tensor", "key": key, "requires_grad": bool(t.requires_grad), "device": str(t.device)}

    def value(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            ref = self.produced.get(id(obj))
            if ref is not None:
                return {"t": "ref", "id": ref}
            if id(obj) in self.known:
                return self.known[id(obj)]
            return self.external(obj)
        scalar = encode_scalar(obj)
        if scalar is not None:
            return scalar
        if isinstance(obj, torch.dtype):
            return {"t": "dtype", "v": str(obj).removeprefix("torch.")}
        if isinstance(obj, torch.device):
            return {"t": "device", "v": str(obj)}
        if isinstance(obj, slice):
            return {"t": "slice", "v": [self.value(obj.start), self.value(obj.stop), self.value(obj.step)]}
        if obj is Ellipsis:
            return {"t": "ellipsis"}
        if isinstance(obj, (list, tuple)):
            kind = "list" if isinstance(obj, list) else "tuple"
            return {"t": kind, "items": [self.value(v) for v in obj]}
        if isinstance(obj, dict) and all(isinstance(k, str) for k in obj):
            return {"t": "dict", "items": [[k, self.value(v)] for k, v in obj.items()]}
        raise _NotData(type(obj).__name__)

    def outputs(self, out: Any) -> list[int | None]:
        refs: list[int | None] = []
        for t in _leaves(out):
            if isinstance(t, torch.Tensor):
                if id(t) not in self.produced:
                    self.produced[id(t)] = len(self.produced) + 1
                    self.alive.append(t)
                refs.append(self.produced[id(t)])
            else:
                refs.append(None)
        return refs


def _where(ev: Any) -> dict[str, Any]:
    f = ev.frame
    return {"file": f.file if f is not None else None, "line": f.line if f is not None else None,
            "function": f.function if f is not None else None}


def encode_step(sess: Any, snap: Any, tensors: dict[str, torch.Tensor]) -> dict[str, Any] | None:
    """The failing step's program (see the module docstring), or None when the step was not
    taped whole; external tensors are added to `tensors` (batch.safetensors)."""
    from .._step import BackwardCall, RootCall, TapeOp, UpdateCall

    rec = snap.record if snap is not None else None
    if rec is None or not rec.taped or rec.truncated or not rec.calls:
        return None
    enc = _Encoder(sess, tensors)
    events: list[dict[str, Any]] = []
    left_out: list[str] = []
    for ev in rec.events()[:MAX_EVENTS]:
        where = _where(ev)
        if isinstance(ev, RootCall):
            try:
                args, kwargs = enc.value(ev.args), enc.value(ev.kwargs)
            except _NotData as e:
                return {"events": [], "left_out": [f"{ev.label}(...) at line {where['line']}: {e}"], "whole": False}
            events.append({"kind": "call", "model": ev.label, "args": args, "kwargs": kwargs,
                           "grad": ev.grad_enabled, "training": ev.training, "out": enc.outputs(ev.output),
                           **where})
        elif isinstance(ev, TapeOp):
            if ev.before_step:
                continue  # its results are the batch as the step saw it (stored as they are)
            path = op_path(ev.func)
            try:
                if path is None:
                    raise _NotData("not a torch function")
                args, kwargs = enc.value(ev.args), enc.value(ev.kwargs)
            except _NotData as e:
                left_out.append(f"{ev.name} at line {where['line']} ({e}): its result is stored")
                continue
            events.append({"kind": "op", "op": path, "name": ev.name, "args": args, "kwargs": kwargs,
                           "grad": ev.grad_enabled, "out": enc.outputs(ev.output), **where})
        elif isinstance(ev, BackwardCall):
            try:
                roots, grads = enc.value(list(ev.roots)), enc.value(ev.grads)
            except _NotData as e:
                left_out.append(f"backward at line {where['line']} ({e})")
                continue
            events.append({"kind": "backward", "roots": roots, "grads": grads, **where})
        elif isinstance(ev, UpdateCall):
            events.append({"kind": "update", "optimizer": ev.index, **where})
    return {"events": events, "left_out": left_out, "whole": not left_out}


# ---------------------------------------------------------------------------- replay
_STUBS: dict[tuple[str, int, str], Any] = {}


def _at_line(file: str | None, line: Any, function: Any) -> Any:
    """A function `f(fn, args, kwargs)` that calls `fn` from a frame located at the user's
    recorded file and line (so a finding of the replay names that line, as the run did)."""
    if not isinstance(file, str) or not isinstance(line, int) or line < 2:
        return lambda fn, a, k: fn(*a, **k)
    name = function if isinstance(function, str) and re.fullmatch(r"[A-Za-z_]\w{0,60}", function) else "step"
    key = (file, line, name)
    stub = _STUBS.get(key)
    if stub is None:
        code = "\n" * (line - 2) + f"def {name}(fn, a, k):\n    return fn(*a, **k)\n"
        scope: dict[str, Any] = {}
        exec(compile(code, file, "exec"), scope)
        stub = _STUBS[key] = scope[name]
    return stub


class StepReplay:
    """Runs a stored step program with the user's models and optimizers."""

    def __init__(self, program: dict[str, Any], models: dict[str, nn.Module], optimizers: list[Any],
                 tensors: dict[str, torch.Tensor], device: torch.device) -> None:
        self.program, self.models, self.optimizers = program, models, optimizers
        self.tensors, self.device = tensors, device
        self.env: dict[int, torch.Tensor] = {}
        self.loaded: dict[str, torch.Tensor] = {}

    def value(self, spec: Any) -> Any:
        kind = spec.get("t") if isinstance(spec, dict) else None
        if kind == "ref":
            return self.env[spec["id"]]
        if kind == "tensor":
            key = spec["key"]
            if key not in self.loaded:
                t = self.tensors[key].to(self.device).clone()  # an in-place op of the step works on a copy
                if spec.get("requires_grad") and t.is_floating_point():
                    t.requires_grad_(True)
                self.loaded[key] = t
            return self.loaded[key]
        if kind in ("param", "buffer"):
            if "model" in spec:
                m = self.models[spec["model"]]
                named = dict(m.named_parameters()) if kind == "param" else dict(m.named_buffers())
                return named[spec["name"]]
            return self.optimizers[spec["opt"]].param_groups[spec["group"]]["params"][spec["index"]]
        if kind == "value":
            return spec["v"]
        if kind == "float":
            return float(spec["v"])
        if kind == "dtype":
            dt = getattr(torch, spec["v"], None)
            if not isinstance(dt, torch.dtype):
                raise ValueError(f"unknown dtype {spec['v']!r}")
            return dt
        if kind == "device":
            return torch.device(spec["v"])
        if kind == "slice":
            return slice(*(self.value(s) for s in spec["v"]))
        if kind == "ellipsis":
            return Ellipsis
        if kind in ("list", "tuple"):
            items = [self.value(s) for s in spec["items"]]
            return tuple(items) if kind == "tuple" else items
        if kind == "dict":
            return {k: self.value(v) for k, v in spec["items"]}
        raise ValueError(f"unknown entry {spec!r}")

    def _bind(self, refs: list[Any], out: Any) -> None:
        for ref, t in zip(refs, _leaves(out)):
            if ref is not None and isinstance(t, torch.Tensor):
                self.env[ref] = t

    def run(self) -> None:
        for ev in self.program["events"]:
            call = _at_line(ev.get("file"), ev.get("line"), ev.get("function"))
            kind = ev["kind"]
            if kind == "update":
                if ev["optimizer"] < len(self.optimizers):
                    call(self.optimizers[ev["optimizer"]].step, (), {})
                continue
            if kind == "backward":
                roots = self.value(ev["roots"])
                call(torch.autograd.backward, (roots,), {"grad_tensors": self.value(ev["grads"])})
                continue
            with torch.set_grad_enabled(bool(ev.get("grad", True))):
                args, kwargs = self.value(ev["args"]), self.value(ev["kwargs"])
                if kind == "call":
                    model = self.models[ev["model"]]
                    model.train(bool(ev.get("training", True)))
                    out = call(model, tuple(args), dict(kwargs))
                else:
                    out = call(resolve(ev["op"]), tuple(args), dict(kwargs))
            self._bind(ev["out"], out)
