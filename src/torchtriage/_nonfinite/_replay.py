"""Replaying a bad step with full instrumentation, leaving the user's run untouched.

The sentinel trips at the step's one sync (before `optimizer.step()` applies anything), so the
parameters are still those the step used. `replaying` restores the step's RNG state, pauses the
session's hooks, re-enters the autocast state the step's forward ran under, and afterwards puts
back the RNG state and every buffer (BatchNorm statistics) so that the user's run continues
bitwise as without torchtriage. Gradients are taken with `torch.autograd.grad`, never into `.grad`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._pytree import tree_leaves

from .._frames import UserFrame, is_user_file, trims_errors
from .._summary import summarize
from ._trace import ModuleStack, nonfinite


@contextlib.contextmanager
def replaying(session: Any, snap: Any, model: nn.Module | list[nn.Module],
              autocast: list[tuple[str, torch.dtype]]) -> Iterator[None]:
    """Run the body as the step ran (RNG, autocast), then restore RNG and the buffers of
    `model` (or of every model in a list: a step replay runs all the step's models)."""
    rng = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    models = model if isinstance(model, list) else [model]
    unique = {id(b): b for m in models for b in m.buffers()}  # a buffer shared by two models, once
    buffers = [(b, b.detach().clone()) for b in unique.values()]
    with contextlib.ExitStack() as stack:
        stack.enter_context(session.paused())
        for device_type, dtype in autocast:
            stack.enter_context(torch.autocast(device_type, dtype=dtype))
        try:
            snap.restore_rng()
            yield
        finally:
            torch.set_rng_state(rng)
            if cuda is not None:
                torch.cuda.set_rng_state_all(cuda)
            with torch.no_grad():
                for b, saved in buffers:
                    if b.shape == saved.shape:
                        b.copy_(saved)


def call_model(model: nn.Module, snap: Any) -> Any:
    return model(*snap.args, **snap.kwargs)


_SCALARS = (type(None), bool, int, float, str)


def _plain_leaves(obj: Any, out: list[torch.Tensor]) -> bool:
    """Tensors of plain tuples / lists / dicts, in pytree order; False at anything else."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
        return True
    tp = type(obj)
    if tp is tuple or tp is list:
        return all(_plain_leaves(x, out) for x in obj)
    if tp is dict:
        return all(_plain_leaves(x, out) for x in obj.values())
    return tp in _SCALARS


def float_leaves(obj: Any) -> list[torch.Tensor]:
    """Floating / complex tensors inside outputs of any shape (tuples, dicts, dataclasses)."""
    # Fast paths (every step: a batch, a model output): one tensor, a call's (args, {}) of
    # tensors; plain containers need no pytree walk. Exact types only; anything else
    # (namedtuples, dataclasses, HF outputs) takes pytree's.
    if isinstance(obj, torch.Tensor):
        return [obj] if obj.is_floating_point() or obj.is_complex() else []
    if type(obj) is tuple and len(obj) == 2 and type(obj[0]) is tuple and type(obj[1]) is dict and not obj[1] \
            and all(isinstance(a, torch.Tensor) for a in obj[0]):
        return [a for a in obj[0] if a.is_floating_point() or a.is_complex()]
    plain: list[torch.Tensor] = []
    if _plain_leaves(obj, plain):
        return [t for t in plain if t.is_floating_point() or t.is_complex()]
    out = []
    for t in tree_leaves(_unpack(obj)):
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()):
            out.append(t)
    return out


def _unpack(obj: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    if hasattr(obj, "to_tuple") and callable(obj.to_tuple):  # HF ModelOutput
        try:
            return obj.to_tuple()
        except Exception:
            return obj
    return obj


def replay_loss(call: Any, old_outputs: list[torch.Tensor], new_outputs: list[torch.Tensor]) -> Any:
    """Re-run a recorded functional loss, on the replayed model outputs where they feed it."""
    import torch.nn.functional as F

    def swap(a: Any) -> Any:
        for old, new in zip(old_outputs, new_outputs):
            if a is old:
                return new
        if isinstance(a, torch.Tensor) and len(new_outputs) == 1 and a.requires_grad \
                and a.numel() == new_outputs[0].numel() and a.grad_fn is not None:
            return new_outputs[0].reshape(a.shape).to(a.dtype)
        return a

    fn = getattr(F, call.name)
    fn = getattr(fn, "__wrapped__", fn)
    return fn(*[swap(a) for a in call.args], **{k: swap(v) for k, v in call.kwargs.items()})


class NodeMap(TorchFunctionMode):
    """During a replayed forward: autograd node -> (torch function, module path)."""

    def __init__(self, modules: ModuleStack) -> None:
        super().__init__()
        self.modules = modules
        self.nodes: dict[int, tuple[Any, str, str | None]] = {}
        self.tag: Any = None  # e.g. the model label of the call being replayed
        self.tags: dict[int, Any] = {}

    @trims_errors
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        try:
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.grad_fn is not None and id(t.grad_fn) not in self.nodes:
                    node = t.grad_fn
                    try:
                        name = resolve_name(func) or getattr(func, "__name__", str(func))
                    except Exception:
                        name = getattr(func, "__name__", str(func))
                    self.nodes[id(node)] = (node, name, self.modules.top)
                    self.tags[id(node)] = self.tag
        except Exception:
            pass
        return out


def graph_nodes(roots: list[Any], stop: set[int] | None = None, limit: int = 100_000) -> list[Any]:
    """Autograd nodes reachable from `roots` (stopping at ids in `stop`)."""
    seen: dict[int, Any] = {}
    todo = [r for r in roots if r is not None]
    while todo and len(seen) < limit:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen[id(n)] = n
        if stop and id(n) in stop:
            continue
        for nxt, _ in getattr(n, "next_functions", ()):
            if nxt is not None and id(nxt) not in seen:
                todo.append(nxt)
    return list(seen.values())


_SAVED_ATTRS: dict[type, tuple[str, ...]] = {}


def saved_tensors(node: Any) -> dict[str, torch.Tensor]:
    attrs = _SAVED_ATTRS.get(type(node))
    if attrs is None:
        attrs = tuple(a for a in dir(node) if a.startswith("_saved_"))
        if not hasattr(node, "__dict__"):
            # A C++ node: its `_saved_*` names are fixed by its class, and dir() costs ~10 us.
            # (Python nodes of custom autograd Functions may carry per-instance attributes.)
            _SAVED_ATTRS[type(node)] = attrs
    return _read_saved(node, attrs)


def _read_saved(node: Any, attrs: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The tensors among `node`'s `_saved_*` attributes `attrs`, by name without the prefix."""
    out = {}
    for attr in attrs:
        try:
            v = getattr(node, attr)
        except Exception:
            continue
        if isinstance(v, torch.Tensor):
            out[attr[len("_saved_"):]] = v
    return out


_LOSS_ATTRS: dict[type, tuple[str, ...]] = {}


def loss_saved(node: Any) -> dict[str, torch.Tensor]:
    """What re-evaluating `node` after backward needs (`_localize._walk_loss_graph`): its saved
    `self` and `other`, when its op is a torch function; nothing else is unpacked (each saved
    tensor costs ~1 us a step, and the loss graph is kept every step)."""
    tp = type(node)
    attrs = _LOSS_ATTRS.get(tp)
    if attrs is None:
        from ._families import base_name

        fn = getattr(torch, base_name(tp.__name__), None)
        names = set(dir(tp)) if fn is not None else set()
        attrs = tuple(a for a in ("_saved_self", "_saved_other") if a in names) if "_saved_self" in names else ()
        if len(_LOSS_ATTRS) < 4096:
            _LOSS_ATTRS[tp] = attrs
    return _read_saved(node, attrs)


def node_op(node: Any) -> str:
    """'SqrtBackward0' -> 'aten::sqrt' (a readable guess for nodes never seen forward)."""
    name = re.sub(r"Backward\d*$", "", type(node).__name__)
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return f"aten::{snake}" if snake else type(node).__name__


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)\n(?P<src>.*)')


def node_frame(node: Any) -> UserFrame | None:
    """The user's line that created `node` (from anomaly-mode metadata recorded at replay)."""
    try:
        lines = node.metadata.get("traceback_")
    except Exception:
        return None
    for entry in reversed(lines or []):
        m = _FRAME.search(entry)
        if m and is_user_file(m.group("file")):
            return UserFrame(m.group("file"), int(m.group("line")), m.group("fn"), m.group("src").strip())
    return None


class FirstNonFiniteNode:
    """Node hooks that keep the first backward node whose finite incoming gradients (its
    grad_outputs) became non-finite outgoing ones: the node that made the non-finite value."""

    def __init__(self) -> None:
        self.first: list[tuple[Any, tuple[Any, ...], tuple[Any, ...]]] = []

    @staticmethod
    def _finite(gs: tuple[Any, ...]) -> bool:
        return not any(g is not None and nonfinite(g) for g in gs)

    def hook_for(self, node: Any) -> Any:
        def hook(grad_inputs: Any, grad_outputs: Any) -> None:
            if not self.first and self._finite(grad_outputs) and not self._finite(grad_inputs):
                self.first.append((node, grad_inputs, grad_outputs))
        return hook


def node_evidence(node: Any, g_in: tuple[Any, ...], g_out: tuple[Any, ...], ev: dict[str, Any]) -> Any:
    """Adds the first non-finite node's evidence to `ev` (its class, its saved tensors and their
    zeros, the incoming gradient, the first non-finite outgoing one); returns that outgoing one."""
    ev["backward node"] = type(node).__name__
    for k, v in saved_tensors(node).items():
        ev[f"saved {k}"] = summarize(v)
        if v.is_floating_point():
            ev[f"zeros in saved {k}"] = int((v == 0).sum())
    ev["incoming gradient"] = next((summarize(g) for g in g_out if g is not None), None)
    bad_in = next((g for g in g_in if g is not None and nonfinite(g)), None)
    ev["outgoing gradient"] = summarize(bad_in)
    return bad_in
