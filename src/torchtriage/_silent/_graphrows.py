"""The rows a loss supervises are rows of the graph the model was given
(`data.target_misaligned`, variant `graph_rows`).

A model on a graph that changes from step to step (a temporal graph, a growing lineage, one
snapshot per step) predicts every node row, and the loss selects the rows to supervise with a
mask (`pred[mask]`). The rows it supervises must be nodes of this step's graph. A mask computed
for the next step (`birth_time <= t + 1`) also selects the nodes that only join the graph at the
next step: rows absent from every edge the model was given, fitted from their static input row.

Measured on the warm-up steps (the step tape): the loss input made by indexing the model's
output with a boolean row mask (a `__getitem__` on the tape), and the node rows the edges of
the step's model call name (`edge_index`, a graph's `edges()`). Per loss line, the rows the mask
selects outside the graph are kept (on the device) until the next step's graph. The verdict,
a warning: in consecutive steps the mask selects every node of the graph plus rows outside it,
and every one of those rows is a node of the next step's graph: the supervision is one step
ahead. A static graph with isolated nodes in its training mask (they never join) stays quiet.
"""

from __future__ import annotations

from typing import Any

import torch

from .._findings import Severity, Stage
from .._frames import UserFrame
from .._ledger._edges import edges_of
from ._plans import Plan, Verdict

MIN_PAIRS = 2  # consecutive steps whose rows outside the graph all joined the next graph
MAX_LINES = 8
MAX_STEPS = 12  # the steps a graph loss line keeps the tape on, past the warm-up, for a graph large enough


def _row_mask(ops: list[Any], inp: Any) -> tuple[torch.Tensor, Any] | None:
    """The boolean row mask that indexed a tensor into `inp` (`pred[mask]`), with its op."""
    for op in reversed(ops):
        if op.output is not inp:
            continue
        if op.name != "__getitem__" or len(op.args) < 2:
            return None
        base, index = op.args[0], op.args[1]
        if isinstance(index, torch.Tensor) and index.dtype == torch.bool and index.dim() == 1 \
                and isinstance(base, torch.Tensor) and base.dim() >= 1 and base.shape[0] == index.shape[0]:
            return index, op
        return None
    return None


def _graph(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    for a in (*args, *kwargs.values()):
        found = edges_of(a)
        if found is not None:
            return found
    return None


def _graphlike(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """A graph among the call's arguments, however few its edges yet (a growing graph)."""
    return any(isinstance(getattr(a, "edge_index", None), torch.Tensor) for a in (*args, *kwargs.values())
               if not isinstance(a, torch.Tensor))


class GraphRows:
    """Per loss line: the rows the mask selected outside the previous step's graph."""

    def __init__(self) -> None:
        self.outside: dict[Any, torch.Tensor] = {}
        self.pairs: dict[Any, list[tuple[int, int, int]]] = {}  # line -> (joined, outside, selected) per pair
        self.broken: set[Any] = set()
        self.reported: set[Any] = set()
        self.last: dict[Any, tuple[int, int]] = {}  # line -> the last step's (selected, outside)
        self.following: set[Any] = set()  # lines of a masked graph loss not judged yet: keep the tape on

    def wants(self, frame: Any, step: int) -> bool:
        return step < MAX_STEPS and frame in self.following and frame not in self.broken \
            and frame not in self.reported

    def plan(self, ops: list[Any], inp: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
             frame: UserFrame | None) -> Plan | None:
        key = frame
        if key in self.broken or key in self.reported or (key not in self.outside and len(self.outside) >= MAX_LINES):
            return None
        found = _row_mask(ops, inp)
        if found is None or not (_graphlike(args, kwargs) or _graph(args, kwargs) is not None):
            self.following.discard(key)
            return None
        self.following.add(key)
        graph = _graph(args, kwargs)
        if graph is None:
            return None
        mask, _ = found
        n = mask.shape[0]
        _, u, v = graph
        if u.device != mask.device:
            return None
        nodes = torch.cat([u.reshape(-1), v.reshape(-1)]).long()
        nodes = nodes[(nodes >= 0) & (nodes < n)]
        present = torch.zeros(n, dtype=torch.bool, device=mask.device)
        present[nodes] = True
        outside = mask & ~present
        prev = self.outside.get(key)
        self.outside[key] = outside
        values = [mask.sum(), outside.sum(), (present & ~mask).sum()]
        if prev is not None and prev.shape == outside.shape:
            values += [prev.sum(), (prev & present).sum()]

        def judge(vals: list[float]) -> Verdict | None:
            selected, out, missed = (int(x) for x in vals[:3])
            last = self.last.get(key)
            self.last[key] = (selected, out)
            if len(vals) == 5 and last is not None:
                before, joined = int(vals[3]), int(vals[4])
                if before:
                    if joined < before:
                        self.broken.add(key)  # rows outside the graph that stay outside: isolated nodes
                        return None
                    self.pairs.setdefault(key, []).append((joined, before, last[0]))
            if missed:
                self.broken.add(key)  # the mask leaves nodes of the graph out: another selection
                return None
            pairs = self.pairs.get(key, [])
            if len(pairs) < MIN_PAIRS or key in self.reported:
                return None
            self.reported.add(key)
            outside, rows = sum(b for _, b, _ in pairs), sum(s for _, _, s in pairs)
            return dict(name="target_misaligned", family="data", variant="graph_rows", own_cause=True,
                        severity=Severity.WARNING, stage=Stage.DATA, outside=outside, selected=rows,
                        steps=len(pairs), nodes=n,
                        evidence={"rows_selected": rows, "rows_outside_the_graph": outside, "rows": n,
                                  "steps_compared": len(pairs),
                                  "outside_rows_in_the_next_graph": [f"{j}/{b}" for j, b, _ in pairs]})

        return Plan(values, judge)
