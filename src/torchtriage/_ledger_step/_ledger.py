"""The step ledger: every loss term → the parameters it reaches → the optimizer that applies
them (issue 26).

For each backward of a judged step (the step tape on, `_terms`), each additive term of the
loss is *pending* from its backward until its gradient is either

  * applied: an optimizer steps (or a GradScaler offers it a step) while a parameter the term
    reached still holds the very `.grad` tensor that backward accumulated into; or
  * dropped: every such parameter's `.grad` was reset (`zero_grad()` sets it to None, the next
    backward makes a new tensor) before any optimizer holding it stepped.

A dropped term did nothing. It is a finding when the run shows what it was meant for: the
term was computed from a model's output (the tape follows it back through `.detach()`), that
model's optimizer stepped while the term was pending, and the term reached none of that
model's parameters — a generator's adversarial term on `G(z).detach()`: the generator trains
on the other terms only. A discriminator's term on `G(z).detach()` is applied by the
discriminator's optimizer, a teacher under `no_grad` reaches nothing and is no term of its own,
a critic's detached target is inside a term that reaches the actor: all stay quiet.

Cost: per judged backward, one walk of each term's subgraph; afterwards, while a term is
pending, an identity test per reached parameter at each optimizer step and backward (no
kernel, no sync). Nothing of the graph is kept past the backward (labels and lines only).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import torch

from .._frames import UserFrame
from ._terms import Term


@dataclasses.dataclass
class Pending:
    """A term from its backward until it is applied or dropped."""

    step: int
    op: str | None
    frame: UserFrame | None
    backward: UserFrame | None
    sources: dict[int, str]  # id(model) -> label: the model calls it was computed from
    cut: UserFrame | None  # the taped detach between a source's output and the term
    cut_op: str | None
    reached: dict[int, str]  # id(model) -> label of the trainable parameters it reached
    n_params: int  # trainable parameters it reached
    params: dict[int, tuple[weakref.ref[torch.Tensor], int]] = dataclasses.field(default_factory=dict)
    stepped: dict[int, str] = dataclasses.field(default_factory=dict)  # models an optimizer stepped meanwhile
    siblings: list[tuple[str | None, UserFrame | None, frozenset[int]]] = dataclasses.field(default_factory=list)
    applied: bool = False
    constant: bool = False  # added to the loss without requiring grad: it reaches nothing


@dataclasses.dataclass
class Verdict:
    """A term that did nothing, and the models it was computed from that trained without it."""

    term: Pending
    missed: dict[int, str]  # id(model) -> label


class StepLedger:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.pending: list[Pending] = []
        self._fresh: list[Pending] = []  # terms of the backward now running (grads not yet made)
        self._opt_cache: dict[int, tuple[tuple[int, ...], frozenset[int], dict[int, str]]] = {}
        # id(model) -> the terms (line, op) that reached it, over the judged steps
        self.model_terms: dict[int, list[tuple[str | None, UserFrame | None]]] = {}

    # ------------------------------------------------------------------ helpers
    def _optimizer(self, opt: torch.optim.Optimizer) -> tuple[frozenset[int], dict[int, str]]:
        """Ids of the tensors `opt` holds and the models they belong to (cached per group sizes)."""
        sig = tuple(len(g["params"]) for g in opt.param_groups)
        hit = self._opt_cache.get(id(opt))
        if hit is not None and hit[0] == sig:
            return hit[1], hit[2]
        index = self.session.param_index
        ids, models = set(), {}
        for g in opt.param_groups:
            for p in g["params"]:
                ids.add(id(p))
                info = index.info(p)
                if info is not None and info.root:
                    models[info.root] = info.label or "?"
        entry = (sig, frozenset(ids), models)
        self._opt_cache[id(opt)] = entry
        return entry[1], entry[2]

    # ------------------------------------------------------------------ events
    def backward_begin(self) -> list[Verdict]:
        """Before a backward: terms whose every parameter's `.grad` was reset since are dropped."""
        out = []
        for term in list(self.pending):
            for pid, (ref, gid) in list(term.params.items()):
                p = ref()
                if p is None or p.grad is None or id(p.grad) != gid:
                    del term.params[pid]
            if not term.params:
                self.pending.remove(term)
                v = self._verdict(term)
                if v is not None:
                    out.append(v)
        return out

    def backward(self, terms: list[Term], step: int, backward: UserFrame | None) -> None:
        """The terms of a backward about to run (its graph intact)."""
        index = self.session.param_index
        made: list[tuple[Pending, dict[int, torch.Tensor]]] = []
        for t in terms:
            reached: dict[int, str] = {}
            held: dict[int, torch.Tensor] = {}
            for pid, leaf in t.leaves.items():
                info = index.info(leaf)
                if info is None or info.optimizer is None or not leaf.requires_grad:
                    continue
                held[pid] = leaf
                if info.root:
                    reached[info.root] = info.label or "?"
            sources = dict(t.sources)
            pend = Pending(step, t.op, t.frame, backward, sources, t.cut, t.cut_op, reached, len(held))
            pend.constant = t.node is None
            pend.applied = not t.complete  # an unfinished walk is never judged
            made.append((pend, held))
            for root in reached:
                self.model_terms.setdefault(root, []).append((t.op, t.frame))
        for pend, held in made:
            pend.siblings = [(o.op, o.frame, frozenset(o.reached)) for o, _ in made if o is not pend]
            pend.params = {pid: (weakref.ref(p), 0) for pid, p in held.items()}
            self._fresh.append(pend)

    def backward_end(self) -> list[Verdict]:
        """The backward ran: each term's parameters now hold the `.grad` it accumulated into."""
        out = []
        for term in self._fresh:
            for pid, (ref, _) in list(term.params.items()):
                p = ref()
                if p is None or p.grad is None:
                    del term.params[pid]
                else:
                    term.params[pid] = (ref, id(p.grad))
            if (term.params or term.constant) and not term.applied:
                self.pending.append(term)  # a constant waits for the next step to see what it missed
            elif not term.applied:
                v = self._verdict(term)
                if v is not None:
                    out.append(v)
        self._fresh = []
        return out

    def optimizer_step(self, opt: torch.optim.Optimizer) -> None:
        """`opt` steps (or a GradScaler offers it a step): the pending terms whose gradient it
        holds are applied; the others note the models it stepped."""
        if not self.pending:
            return
        ids, models = self._optimizer(opt)
        for term in list(self.pending):
            for pid, (ref, gid) in term.params.items():
                p = ref()
                if pid in ids and p is not None and p.grad is not None and id(p.grad) == gid:
                    term.applied = True
                    break
            if term.applied:
                self.pending.remove(term)
            else:
                term.stepped.update(models)

    def end(self) -> list[Verdict]:
        """The session ends: what is still pending was never applied."""
        out = [v for v in (self._verdict(t) for t in self.pending) if v is not None]
        self.pending = []
        return out

    # ------------------------------------------------------------------ judging
    def _verdict(self, term: Pending) -> Verdict | None:
        if term.applied:
            return None
        missed = {m: label for m, label in term.sources.items() if m in term.stepped and m not in term.reached}
        if not missed:
            return None
        # the model trained on other terms of the same loss: they are the evidence
        if not any(set(missed) & reached for _, _, reached in term.siblings):
            return None
        return Verdict(term, missed)

