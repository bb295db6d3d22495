"""Where a node of a model's autograd graph was made: the module, the torch function and the
user's line, found by replaying the model call once.

The watched models run without per-module hooks, so a finding read off the graph knows the
node (`SoftmaxBackward0` of the input of `cross_entropy`, a `LogSoftmaxBackward0` with
`dim=0` at a model's output) but not who made it. Only once a verdict is in, the model call
whose output holds the node is replayed (same arguments, RNG and autocast; RNG and buffers
restored, the session paused) with grad on, under `NodeMap`, which maps each node the replay
creates to the torch function and the module path that ran it; the output leaf in the same
place gives the replayed node (past any views). Its line is the innermost frame of the user's
code on the op's stack inside the replay (a `log_softmax` in the model's `forward`; for an
`nn.Softmax` inside an `nn.Sequential`, the user's line that called the Sequential). Cost: one
forward with its graph, per finding site.

`input_module` finds the loss input's producer: the input's first node past any view matched
with the outputs of the step's root calls (kept while the step tape is on). A loss input
computed outside the model (`F.softmax(model(x))` in the loop) matches no root call: the
finding keeps the loss's own module and line.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import torch
import torch.nn as nn
from torch.utils._pytree import tree_leaves

from .._frames import UserFrame, find_frame, in_user_file, trims_errors, user_frame_of
from .._nonfinite._localize import _namer, _target
from .._nonfinite._replay import NodeMap, replaying
from .._nonfinite._trace import ModuleStack
from ._loss_inputs import first_producing_node

# the verdicts that are about what produced the loss input
INPUT_VERDICTS = frozenset({"probabilities_to_cross_entropy", "sigmoid_before_logits_loss",
                            "nll_without_log_softmax", "kl_div_input_not_log", "squashed_twice"})


@dataclasses.dataclass(frozen=True)
class NodeSite:
    module: str  # "" for the model's own forward
    func: str  # the torch function's short name: "softmax", "log_softmax"
    frame: UserFrame | None  # the user's line inside the model call, None when there is none


def _leaves(out: Any) -> list[torch.Tensor]:
    try:
        return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    except Exception:
        return []


def node_site(session: Any, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any,
              node: Any, autocast: list[tuple[str, torch.dtype]]) -> NodeSite | None:
    """Replay `model(*args, **kwargs)`, whose `output` holds `node` (past views), and say where
    the replay made that node; None when it cannot tell."""
    index = next((i for i, t in enumerate(_leaves(output)) if first_producing_node(t) is node), None)
    snap = session.snapshot
    if index is None or snap is None:
        return None
    model = _target(model)  # the eager module of a compiled one; DDP's local module
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return None  # its forward runs collectives: one rank replaying alone would wait forever
    mods = ModuleStack(_namer(session))
    nodes = _NodeLines(mods, sys._getframe())
    try:
        with replaying(session, snap, model, autocast), torch.enable_grad(), mods, nodes:
            out = model(*args, **kwargs)
        leaves = _leaves(out)
        again = first_producing_node(leaves[index]) if index < len(leaves) else None
        entry = nodes.nodes.get(id(again)) if again is not None else None
        frame = nodes.frames.get(id(again)) if again is not None else None
    except Exception:  # a replay that cannot run leaves the finding as it was, never breaks the step
        return None
    finally:
        nodes.stop = None
    if entry is None or entry[2] is None:
        return None
    return NodeSite(entry[2], str(entry[1]).rsplit(".", 1)[-1], frame)


def input_module(session: Any, inp: torch.Tensor, autocast: list[tuple[str, torch.dtype]],
                 node: Any = None) -> NodeSite | None:
    """Where the module whose output `inp` is (through views) made it, or None; with `node`,
    where that node (a root call's output node below `inp`) was made."""
    node = node if node is not None else first_producing_node(inp)
    snap = session.snapshot
    if node is None or snap is None:
        return None
    for call in reversed(snap.record.calls):  # the latest call first
        if any(first_producing_node(t) is node for t in _leaves(call.output)):
            return node_site(session, call.model, call.args, call.kwargs, call.output, node, autocast)
    return None


def replay_site(session: Any, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                autocast: list[tuple[str, torch.dtype]], match: Any) -> NodeSite | None:
    """Replay `model(*args, **kwargs)` as `node_site` does and say where it made the first node
    (in creation order) for which `match(node)` holds: a node inside the call, not its output."""
    snap = session.snapshot
    model = _target(model)
    if snap is None or isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return None
    mods = ModuleStack(_namer(session))
    nodes = _NodeLines(mods, sys._getframe())
    try:
        with replaying(session, snap, model, autocast), torch.enable_grad(), mods, nodes:
            out = model(*args, **kwargs)
        del out
        for key, (node, func, module) in nodes.nodes.items():
            if module is not None and match(node):
                return NodeSite(module, str(func).rsplit(".", 1)[-1], nodes.frames.get(key))
    except Exception:  # a replay that cannot run leaves the finding as it was
        return None
    finally:
        nodes.stop = None
    return None


class _NodeLines(NodeMap):
    """`NodeMap` that also keeps the user's line of each node's op (inside the replay only: the
    search stops at the frame that started it)."""

    def __init__(self, modules: ModuleStack, stop: Any) -> None:
        super().__init__(modules)
        self.stop = stop
        self.frames: dict[int, UserFrame | None] = {}

    @trims_errors
    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        known = len(self.nodes)
        out = super().__torch_function__(func, types, args, kwargs)
        if len(self.nodes) != known:
            f = find_frame(in_user_file, sys._getframe(1), stop=self.stop)
            frame = user_frame_of(f) if f is not None else None
            for t in _leaves(out):
                if t.grad_fn is not None and id(t.grad_fn) in self.nodes and id(t.grad_fn) not in self.frames:
                    self.frames[id(t.grad_fn)] = frame
        return out
