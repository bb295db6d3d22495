"""A module buffer updated in place from the batch with its autograd graph: the graph chains
across steps.

A hand-written normalization or running statistic (`self.stored_mean[:] = self.stored_mean *
(1 - m) + mean * m`) computed outside `torch.no_grad()` from a tensor of the forward gives the
buffer a `grad_fn` whose graph holds the previous step's buffer graph, and so on: nothing
backpropagates through it, so nothing frees it, and the graph (with every batch statistic it
saved) grows with each training step. The loss is unchanged; memory grows without bound.

What is measured, per root model, on consecutive grad-enabled calls: a buffer (`named_buffers`)
that carries a graph at call k, a newer node than at call k-1, whose graph reaches the node it
had at call k-1 (autograd's node numbers, `_carried._seq`). `_MIN_CALLS` such calls in a row is
the harm: that many steps' graphs alive at once, held by the buffer.

Cost: the first `_CALLS` grad-enabled root calls of each model: a walk of its buffers' `grad_fn`
attributes and, for a buffer that has one, a bounded walk of its graph. No tensor is read.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from ._carried import _seq
from ._statechain import _reaches

_CALLS = 64  # root calls watched per model
_MIN_CALLS = 8  # steps whose graphs one buffer holds
_BUFFERS = 256  # buffers looked at per model


class BufferChain:
    """Per root model and buffer: how many consecutive calls the buffer's graph chains over."""

    def __init__(self) -> None:
        self._calls: dict[int, int] = {}
        self._last: dict[tuple[int, str], tuple[int, int]] = {}  # (model, buffer) -> (node number, chain)
        self.reported: set[int] = set()

    def before(self, model: nn.Module) -> tuple[str, int] | None:
        """(buffer name, calls chained) when a buffer's chain reaches `_MIN_CALLS` at this call
        (once per model), else None."""
        key = id(model)
        n = self._calls.get(key, 0)
        if key in self.reported or n >= _CALLS or not torch.is_grad_enabled():
            return None
        self._calls[key] = n + 1
        for i, (name, buf) in enumerate(model.named_buffers()):
            if i >= _BUFFERS:
                break
            node = buf.grad_fn
            seq = _seq(node) if node is not None else None
            if seq is None:
                self._last.pop((key, name), None)
                continue
            prev = self._last.get((key, name))
            chain = 0
            if prev is not None and seq > prev[0] and _reaches([node], {prev[0]}):
                chain = prev[1] + 1
            elif prev is not None and seq == prev[0]:
                chain = prev[1]  # not updated since (a call in eval mode): the same graph
            self._last[(key, name)] = (seq, chain)
            if chain + 1 >= _MIN_CALLS:
                self.reported.add(key)
                return name, chain + 1
        return None


def buffer_finding(label: str, module: nn.Module, name: str, calls: int, frame: object, step: int) -> Finding:
    """`silent.loss_graph_kept.buffer` (warning, memory) at the model call whose buffer carries it."""
    owner, _, attr = name.rpartition(".")
    sub = module.get_submodule(owner) if owner else module
    key = "silent.loss_graph_kept.buffer"
    path = f"{label}.{name}"
    return from_catalogue(
        Category.MEMORY, "silent.loss_graph_kept", key, fields={"name": path, "n": calls,
                                                                 "cls": type(sub).__name__},
        cause_key=key + ".cause", next_key=key + ".next", frame=frame, source_line=True,
        severity=Severity.WARNING, stage=Stage.FORWARD, step=step, module=f"{owner or label} ({type(sub).__name__})",
        evidence={"buffer": path, "buffer_owner": type(sub).__name__, "calls_chained": calls,
                  "buffer_attribute": attr})
