"""Autograd graphs that outlive their step, other than a loss's (`GraphKeeper` in `_loop.py`).

    model outputs   a token in the `metadata` of each root forward's output node lives exactly
                    as long as that node. Something the loop keeps across steps that was
                    computed from the output with its graph (a metric's `torch.pow(pred - y, 2)`
                    summed into a running tensor, a list of un-detached predictions) keeps each
                    step's output node, and with it the step's graph, alive.
    gradients with  `backward(create_graph=True)` leaves `.grad` tensors that carry a graph; a
    a graph         leaf that is not a parameter (an interpolated input given requires_grad) is
                    never reset by `zero_grad()`, and its `.grad`'s graph holds the leaf again:
                    a reference cycle through autograd's C++ nodes that Python's collector
                    cannot free. The tokens go on those `.grad` nodes.

The harm is measured, never assumed: tokens from six or more steps that ended two or more
steps ago still alive, and more of them than at the previous step's end (memory that grows with
the steps). A tensor that lives until the next iteration reassigns it keeps one step's graph.
Garbage that only Python's cyclic collector frees is not kept (session 18): an output stored on a
class built per forward (`type("Out", (), {"logits": ...})()`, a cycle through the class) lives
until the collector's next pass. When the count would fire, one `gc.collect()` runs and the count
is taken again; after a collection that freed them, the next is due no earlier than twice the
step (a run of such garbage costs a handful of collections, never one per step).
"""

from __future__ import annotations

import gc
import os
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from ._loop import GraphKeeper

_MIN_STEPS = 6  # a short window of un-detached outputs (a deque of the last few for a plot) is bounded
_LEAVES = 4096  # nodes walked from a create_graph backward's roots to its leaves


class OutputKeeper(GraphKeeper):
    """Tokens on the root forwards' output nodes (the loss's own tokens are GraphKeeper's)."""

    KEY = "torchtriage.silent.output"
    HOLD = "torchtriage.silent.output_holder"


class GradKeeper(GraphKeeper):
    """Tokens on the graphs of `.grad` tensors a `backward(create_graph=True)` left."""

    KEY = "torchtriage.silent.grad_graph"
    HOLD = "torchtriage.silent.grad_holder"


def leaves_reached(roots: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """The leaf tensors a backward from `roots` accumulates into (their AccumulateGrad nodes)."""
    seen: set[int] = set()
    todo: list[Any] = [r.grad_fn for r in roots if isinstance(r, torch.Tensor) and r.grad_fn is not None]
    out = []
    while todo and len(seen) < _LEAVES:
        fn = todo.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        var = getattr(fn, "variable", None)
        if isinstance(var, torch.Tensor):
            out.append(var)
            continue
        todo.extend(nxt for nxt, _ in fn.next_functions)
    return out


class Growth:
    """Distinct old steps whose graphs are alive, judged at each step's end."""

    def __init__(self) -> None:
        self.last = 0
        self.fired = False

    def judge(self, alive: list[tuple[int, Any]]) -> list[tuple[int, Any]] | None:
        """The alive (step, frame) pairs when they span `_MIN_STEPS` or more old steps and more
        steps than at the last judgement, else None."""
        if self.fired:
            return None
        steps = {s for s, _ in alive}
        grew = len(steps) > self.last
        self.last = len(steps)
        if len(steps) >= _MIN_STEPS and grew:
            self.fired = True
            return alive
        return None

    def due(self, alive: list[tuple[int, Any]]) -> bool:
        """`judge` would fire on `alive` (nothing changed)."""
        steps = {s for s, _ in alive}
        return not self.fired and len(steps) >= _MIN_STEPS and len(steps) > self.last


class KeptGraphs:
    """The output and `.grad` watches of one session."""

    def __init__(self) -> None:
        self.outputs = OutputKeeper()
        self.grads = GradKeeper()
        self.output_growth = Growth()
        self.grad_growth = Growth()
        self.collect_from = 0  # the first step a confirming `gc.collect()` may run at

    def output(self, out: torch.Tensor | None, step: int, frame: Any) -> None:
        if out is not None and out.grad_fn is not None and not self.output_growth.fired:
            self.outputs.mark(out, step, frame)

    def backward_done(self, roots: tuple[torch.Tensor, ...], step: int, frame: Any,
                      params: set[int]) -> None:
        """After a `backward(create_graph=True)`: tokens on the graphs of the `.grad`s it left on
        leaves that are not parameters (a parameter's `.grad` is reset by `zero_grad()`)."""
        if self.grad_growth.fired:
            return
        for leaf in leaves_reached(roots):
            if id(leaf) in params:
                continue
            g = leaf.grad
            if g is not None and g.grad_fn is not None:
                self.grads.mark(g, step, frame)

    def verdicts(self, step: int) -> tuple[list[tuple[int, Any]] | None, list[tuple[int, Any]] | None]:
        """(outputs kept, grads kept): the alive (step, frame) pairs of a watch whose graphs grow."""
        return (self._judge(self.output_growth, self.outputs, step),
                self._judge(self.grad_growth, self.grads, step))

    def _judge(self, growth: Growth, keeper: GraphKeeper, step: int) -> list[tuple[int, Any]] | None:
        """A verdict only on what a cyclic collection leaves alive."""
        alive = keeper.alive_before(step)
        if not growth.due(alive):
            return growth.judge(alive)
        if step < self.collect_from:
            return None  # (the last collection freed them: judged again at the next one)
        gc.collect()
        alive = keeper.alive_before(step)
        if not growth.due(alive):
            self.collect_from = max(2 * step, step + 8)
        return growth.judge(alive)


def kept_finding(kind: str, alive: list[tuple[int, Any]], step: int, holder: Any = None) -> Finding:
    """`silent.loss_graph_kept` (warning, memory) for kept outputs ("outputs") or create_graph
    `.grad`s ("grad"), at the line of the oldest token that has one."""
    key = f"silent.loss_graph_kept.{kind}"
    steps = sorted({s for s, _ in alive})
    made = next((f for _, f in sorted(alive, key=lambda a: a[0]) if f is not None), None)
    frame = holder or made  # the line that keeps them (a metric's `torch.pow(pred - y, 2)`), else the call
    return from_catalogue(
        Category.MEMORY, "silent.loss_graph_kept", key, fields={"n": len(steps)},
        cause_key=key + ".cause", next_key=key + ".next", frame=frame, source_line=True,
        severity=Severity.WARNING, stage=Stage.BACKWARD if kind == "grad" else Stage.FORWARD, step=step,
        evidence={"old_graphs_alive": len(alive), "from_steps": steps[:8], "steps_alive": len(steps),
                  "made_at": f"{os.path.basename(made.file)}:{made.line}" if holder and made else None})
