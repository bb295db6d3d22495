"""A model state carried with its graph from one batch's forward to the next, no backward between.

An RNN's `(h, c)` kept on the model (`out, self.hidden = self.lstm(x, self.hidden)`) or passed
back in (`out, h = model(x, h)`) links each forward's graph to the previous one. In training a
backward usually ends the chain (and `_carried.py` sees a backward that runs through earlier
steps); in an evaluation loop run without `torch.no_grad()` nothing ever frees it: the graphs of
every evaluated batch stay alive, and each batch's prediction depends on the state the previous,
unrelated batch left.

What is measured, per root model, on consecutive grad-enabled calls with no backward between:
the state entering call k (tensors with a graph among its arguments and the modules' plain
attributes) was made after the state entering call k-1 and its graph reaches that state's nodes
(autograd's node numbers, `_carried._seq`); and call k's other tensor inputs are fresh (no
storage shared with call k-1's: independent batches, not the decoder steps of one sequence, whose
inputs are slices of one target tensor or the previous step's output, or a `(B, 1)` column of
tokens: a fresh input has two axes longer than 1). `_MIN_CALLS` such calls
in a row is the harm: that many batches' graphs alive at once.

Cost: the first `_CALLS` grad-enabled root calls of each model: a walk of its modules' plain
attributes and a bounded walk of the carried state's graph. No tensor is read.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
from torch.utils import _pytree as pytree

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from ._carried import _seq
from ._common import storage_ptr

_CALLS = 256  # root calls watched per model
_MIN_CALLS = 8  # batches whose graphs one carried state holds
_WALK = 2000  # nodes walked from the entering state looking for the previous state's nodes
_SKIP = frozenset({"_parameters", "_buffers", "_modules", "training"})


def _attr_state(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) of the plain tensor attributes (or tuples/lists of them) with a graph."""
    out = []
    for path, m in model.named_modules():
        for k, v in vars(m).items():
            if k in _SKIP or k.startswith("__"):
                continue
            vals = v if isinstance(v, (tuple, list)) and len(v) <= 8 else (v,)
            for t in vals:
                if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                    out.append((f"{path}.{k}" if path else k, t))
    return out


def _reaches(nodes: list[Any], wanted: set[int]) -> bool:
    seen: set[int] = set()
    todo = list(nodes)
    while todo and len(seen) < _WALK:
        node = todo.pop(0)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if _seq(node) in wanted:
            return True
        todo.extend(n for n, _ in getattr(node, "next_functions", ()) if n is not None)
    return False


class _Watch:
    def __init__(self) -> None:
        self.calls = 0
        self.chain = 0
        self.seqs: set[int] = set()  # node numbers of the state that entered the previous call
        self.ptrs: set[int] = set()  # storages of the previous call's other inputs
        self.entering: list[tuple[str, torch.Tensor]] = []  # this call's attribute state (until its end)
        self.names: list[str] = []


class StateChain:
    """Per root model: how many consecutive calls one carried state's graph spans."""

    def __init__(self) -> None:
        self._watch: dict[int, _Watch] = {}
        self.reported: set[int] = set()

    def reset(self) -> None:
        """A backward (or a no-grad call) ends every chain."""
        for w in self._watch.values():
            w.chain, w.seqs, w.ptrs = 0, set(), set()

    def before(self, model: nn.Module) -> None:
        w = self._watch.setdefault(id(model), _Watch())
        if id(model) in self.reported or w.calls >= _CALLS:
            return
        w.entering = _attr_state(model) if torch.is_grad_enabled() else []

    def after(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
        """The chain's length when it reaches `_MIN_CALLS` at this call (once per model), else None."""
        w = self._watch.get(id(model))
        if w is None or id(model) in self.reported or w.calls >= _CALLS:
            return None
        w.calls += 1
        entering, w.entering = w.entering, []
        if not torch.is_grad_enabled():
            w.chain, w.seqs, w.ptrs = 0, set(), set()
            return None
        state = list(entering)
        ptrs: set[int] = set()
        for t in pytree.tree_leaves((args, kwargs)):
            if not isinstance(t, torch.Tensor):
                continue
            if t.grad_fn is not None:
                state.append(("", t))
            elif not t.requires_grad and sum(d > 1 for d in t.shape) >= 2:
                ptr = storage_ptr(t)  # a batch of sequences or features, not a token step
                if ptr is not None:  # (a sparse adjacency has no plain storage)
                    ptrs.add(ptr)
        seqs = {s for s in (_seq(t.grad_fn) for _, t in state) if s is not None}
        newer = [t.grad_fn for _, t in state if (_seq(t.grad_fn) or -1) > max(w.seqs, default=-1)]
        fresh = bool(ptrs) and not (ptrs & w.ptrs)
        if w.seqs and newer and fresh and _reaches(newer, w.seqs):
            w.chain += 1
        else:
            w.chain = 0
        w.seqs, w.ptrs = seqs, ptrs
        w.names = list(dict.fromkeys(n for n, _ in state if n)) or w.names
        if w.chain + 1 >= _MIN_CALLS:
            self.reported.add(id(model))
            return w.chain + 1
        return None

    def names(self, model: nn.Module) -> list[str]:
        w = self._watch.get(id(model))
        return list(w.names) if w is not None else []


def state_finding(label: str, names: list[str], calls: int, frame: Any, step: int) -> Finding:
    """`silent.loss_graph_kept.state` (warning, memory) at the call that carried the state in."""
    name = ", ".join(f"{label}.{n}" for n in names[:3]) if names else "the state passed back in"
    key = "silent.loss_graph_kept.state"
    return from_catalogue(
        Category.MEMORY, "silent.loss_graph_kept", key, fields={"name": name, "n": calls},
        cause_key=key + ".cause", next_key=key + ".next", frame=frame, source_line=True,
        severity=Severity.WARNING, stage=Stage.FORWARD, step=step, module=label,
        evidence={"calls_chained": calls, "state": names[:3] or None, "backward_between": 0})
