"""Which module made a loss's input: the `nn.Softmax` at the end of a model whose output goes to
`cross_entropy`, the `Sigmoid` before `binary_cross_entropy_with_logits`.

A finding about the *meaning* of the loss input (probabilities where logits were expected) is
about the module that produced it, not about the loss module. The autograd graph holds the
producer's node but not its module, and the watched models run without per-module hooks. So,
only once a verdict is in: the loss input's first node that is not a view is looked up among
the step's root calls (each call's outputs, kept while the step tape is on), and that call's
forward is replayed once (same arguments, RNG and autocast; RNG and buffers restored, the
session paused) with grad on under `NodeMap`, which maps each node the replay creates to the
torch function and the module path that ran it. The output leaf in the same place gives the
replayed node, and with it the module. Cost: one forward with its graph, per finding site.
A loss input computed outside the model (`F.softmax(model(x))` in the loop) matches no root
call output: the finding keeps the loss's own module and line.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from ._loss_inputs import first_producing_node

# the verdicts that are about what produced the loss input
INPUT_VERDICTS = frozenset({"probabilities_to_cross_entropy", "sigmoid_before_logits_loss",
                            "nll_without_log_softmax"})


def _leaves(out: Any) -> list[torch.Tensor]:
    try:
        return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    except Exception:
        return []


def _call_of(record: Any, node: Any) -> tuple[Any, int] | None:
    """The root call (latest first) and the index of its output leaf whose producer is `node`."""
    for call in reversed(record.calls):
        for i, t in enumerate(_leaves(call.output)):
            if first_producing_node(t) is node:
                return call, i
    return None


def input_module(session: Any, inp: torch.Tensor, autocast: list[tuple[str, torch.dtype]]) -> tuple[str, str] | None:
    """(module path, torch function) of the module whose output `inp` is (through views), or None."""
    from .._nonfinite._localize import _namer
    from .._nonfinite._replay import NodeMap, replaying
    from .._nonfinite._trace import ModuleStack

    node = first_producing_node(inp)
    snap = session.snapshot
    if node is None or snap is None:
        return None
    found = _call_of(snap.record, node)
    if found is None:
        return None
    call, index = found
    model = getattr(call.model, "_orig_mod", call.model)
    mods = ModuleStack(_namer(session))
    nodes = NodeMap(mods)
    try:
        with replaying(session, snap, model, autocast), torch.enable_grad(), mods, nodes:
            out = model(*call.args, **call.kwargs)
        leaves = _leaves(out)
        again = first_producing_node(leaves[index]) if index < len(leaves) else None
        entry = nodes.nodes.get(id(again)) if again is not None else None
    except Exception:  # a replay that cannot run leaves the finding on the loss, never breaks the step
        return None
    if entry is None or entry[2] is None:
        return None
    return entry[2], str(entry[1]).rsplit(".", 1)[-1]
