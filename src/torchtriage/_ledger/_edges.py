"""Graph links split apart from their reverse (issue 25, `data.split_overlap`, key `edge_reverse`).

A graph whose links are undirected is stored with each link twice, `(u, v)` and `(v, u)` (DGL's
bidirected graphs, PyG's `to_undirected`). A link-prediction split that permutes the directed
edge ids, not the links, puts the two directions of a link into different splits: the test edge
`(u, v)` is evaluated while `(v, u)` is a training positive and stays in the message-passing
graph, so the model is scored on links it was trained on (a symmetric score, a dot product, sees
no difference).

The invariant: a link evaluated as held out is in no training edge set, in either direction.
Measured on the edge sets that reach a root forward: an integer tensor of shape `(2, E)` (an
`edge_index`), an object's `edge_index` attribute (a PyG `Data`), or a graph object's `edges()`
(an object with `edges` and `num_nodes`: DGL's graph) returning two 1-D integer tensors. Each
edge set is kept once (by identity) per side, training forwards (gradients on, train() mode) and
evaluation forwards, by reference, at most `MOST` edges; one read at the end. When a training
edge set stores most of its links both ways (`SYMMETRIC`: the graph is undirected), an evaluated
edge set of which at least `SHARE` of the distinct edges (and `MIN_EDGES`) are not in such an
undirected training graph themselves but have their reverse in it is a split that cut links apart
(sampled negatives, fresh every step and stored one way, are no training links): a warning with the
counts and an example. Evaluated edges that are training edges in their own direction (a train
AUC) are not counted; a directed graph (few reverses) is left alone.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from .._frames import user_frame_from_stack
from ._make import finding

MIN_EDGES = 8
MOST = 1 << 21  # edges kept per side
SYMMETRIC = 0.5  # share of a training edge set's edges whose reverse is in it: an undirected graph
SHARE = 0.1  # share of an evaluated edge set's edges trained on in the other direction


Found = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (the tensor that names the set, sources, targets)


def _pair(t: Any) -> Found | None:
    if isinstance(t, torch.Tensor) and t.dim() == 2 and t.shape[0] == 2 and t.shape[1] >= MIN_EDGES \
            and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool:
        return t, t[0], t[1]
    return None


def edges_of(obj: Any) -> Found | None:
    if isinstance(obj, torch.Tensor):
        return _pair(obj)
    if isinstance(obj, (str, bytes, int, float, list, tuple, dict, nn.Module)) or obj is None:
        return None
    found = _pair(getattr(obj, "edge_index", None))
    if found is not None:
        return found
    kind = type(obj)
    if callable(getattr(kind, "edges", None)) and hasattr(kind, "num_nodes"):
        try:
            uv = obj.edges()
        except Exception:  # (another signature: not a graph's edge list)
            return None
        if isinstance(uv, (tuple, list)) and len(uv) == 2 and all(isinstance(t, torch.Tensor) for t in uv):
            u, v = uv
            if u.dim() == 1 and u.shape == v.shape and u.shape[0] >= MIN_EDGES and not u.is_floating_point() \
                    and not v.is_floating_point():
                return u, u, v
    return None


class _Set:
    def __init__(self, u: torch.Tensor, v: torch.Tensor, frame: Any) -> None:
        self.u, self.v, self.frame = u, v, frame


class Edges:
    def __init__(self) -> None:
        self.sides: dict[bool, list[_Set]] = {True: [], False: []}
        self.kept = {True: 0, False: 0}
        self.known: dict[tuple[int, int, int, int, int], weakref.ref[torch.Tensor]] = {}
        self.objects: dict[tuple[int, int], weakref.ref[Any]] = {}

    def on_forward(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        values = [*args, *kwargs.values()]
        if not values:
            return
        training = torch.is_grad_enabled() and not torch.is_inference_mode_enabled() and model.training
        for obj in values[:8]:
            if not isinstance(obj, torch.Tensor) and hasattr(type(obj), "num_nodes"):
                mark = (int(training), id(obj))
                again = self.objects.get(mark)
                if again is not None and again() is obj:
                    continue  # (a graph object given again: its edges were kept; `edges()` not called again)
                try:
                    self.objects[mark] = weakref.ref(obj)
                except TypeError:
                    pass
                if len(self.objects) > 4096:
                    self.objects.clear()
            uv = edges_of(obj)
            if uv is None:
                continue
            t, u, v = uv
            key = (int(training), id(t), t.untyped_storage().data_ptr(), int(t.storage_offset()), int(t._version))
            seen = self.known.get(key)
            if seen is not None and seen() is t:
                continue  # (the same edge set each epoch: full-graph training)
            if self.kept[training] + int(u.shape[0]) > MOST:
                continue
            if len(self.known) > 4096:
                self.known.clear()
            self.known[key] = weakref.ref(t)
            self.sides[training].append(_Set(u.detach(), v.detach(), user_frame_from_stack(1)))
            self.kept[training] += int(u.shape[0])

    def end(self) -> list[Any]:
        train, evals = self.sides[True], self.sides[False]
        if not train or not evals:
            return []
        sets = [*train, *evals]
        with torch.no_grad():
            dev = sets[0].u.device
            codes = [(s.u.to(dev).long() << 32) | s.v.to(dev).long() for s in sets]
            flipped = [(s.v.to(dev).long() << 32) | s.u.to(dev).long() for s in sets]
            joined = torch.cat([*codes, *flipped]).cpu().numpy()  # the one read
        sizes = [int(c.numel()) for c in codes]
        parts = np.split(joined, np.cumsum(sizes + sizes)[:-1])
        fwd, rev = parts[:len(sets)], parts[len(sets):]
        tr_fwd = fwd[:len(train)]
        symmetric = [_both_ways(f, r) for f, r in zip(tr_fwd, rev[:len(train)])]
        if not symmetric or max(symmetric) < SYMMETRIC:
            return []  # a directed graph: a reverse edge is another fact
        best = int(np.argmax(symmetric))
        # the graphs trained on that store their links both ways (message passing); sampled
        # negatives, fresh every step, are no links and would cover most pairs by chance
        known = np.unique(np.concatenate([f for f, share in zip(tr_fwd, symmetric) if share >= SYMMETRIC]))
        for s, f, r in zip(evals, fwd[len(train):], rev[len(train):]):
            f, idx = np.unique(f, return_index=True)
            r = r[idx]
            loops = (f >> 32) == (f & 0xFFFFFFFF)
            hit = ~np.isin(f, known) & np.isin(r, known) & ~loops
            n, count = int(f.size), int(hit.sum())
            if count < MIN_EDGES or count < SHARE * n:
                continue
            k = int(np.flatnonzero(hit)[0])
            a, b = int(f[k] >> 32), int(f[k] & 0xFFFFFFFF)
            frame = s.frame
            train_frame = train[best].frame
            where = f"{frame.file}:{frame.line}" if frame else "?"
            train_where = f"{train_frame.file}:{train_frame.line}" if train_frame else "?"
            share = f"{100 * count / n:.1f}%"
            fields = {"count": count, "n": n, "share": share, "eval_where": where, "train_where": train_where,
                      "u": a, "v": b, "symmetric": f"{100 * symmetric[best]:.0f}%"}
            evidence = {"evaluation_at": where, "training_at": train_where, "count": count, "evaluated_edges": n,
                        "matched": "reverse edges", "example_edge": [a, b],
                        "training_edges_with_reverse": round(symmetric[best], 4)}
            return [finding("split_overlap", "edge_reverse", "warning", frame, fields, evidence)]
        return []


def _both_ways(f: np.ndarray, r: np.ndarray) -> float:
    """The share of a set's edges, self-loops left out (a padding id paired with itself in a
    batch of two token sequences), whose reverse is in the set too."""
    other = f != r
    if int(other.sum()) < MIN_EDGES:
        return 0.0
    return float(np.isin(f[other], r[other]).mean())
