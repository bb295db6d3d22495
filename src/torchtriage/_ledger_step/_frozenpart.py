"""A frozen part of a model whose normalization statistics still move (session 19).

Freezing a pretrained part (a backbone under a linear probe, an encoder under a new decoder)
fixes its parameters; its BatchNorm layers' running statistics are buffers, and in training mode
every forward folds the batch into them. A model trained with `model.train()` around a frozen
backbone (`requires_grad = False` on every parameter but the head's, or a backbone left out of
the optimizer) keeps rewriting the frozen part's statistics with the new data: the head is fitted
to batch-normalized features, evaluated on features normalized with the drifted running
statistics, and the "frozen" backbone saved at the end is not the one loaded.

The invariant: a part of a trained model whose parameters never change keeps its running
statistics. At the ledger's judged optimizer steps, for each watched model with a parameter the
stepping optimizer trains, the normalization layers in training mode are placed in their model:
the part is the topmost module above the layer (below the model itself) whose parameters are
all frozen (`requires_grad=False`, or held by no optimizer of the session) and that holds a
weight of another kind than a normalization layer (the layer that feeds it: the features it
normalizes are fixed too). The first time a layer is seen so, its statistics are copied
(`_normstats.Kept`) with its part's parameters' version counters. At the end a layer is judged
when its part's parameters are the same tensors at the same versions, all still frozen (never
updated since: a fine-tune that unfreezes the part later, a GAN discriminator frozen for the
generator's step and trained at its own, an EMA or momentum copy written in place all drop out;
so does a layer seen in a part that a later judged step found trainable), and its statistics
moved since the copy: a warning with how far (channels' means in units of their standard
deviation, variances' largest factor) and how many batches they took in.

Quiet on purpose: a layer in `eval()` (the fix), a `train()` asked of the frozen part or of a
module inside it (`backbone.train()`, `model.apply(set_bn_train)`: statistics adapted on
purpose, AdaBN), `momentum=None` (a cumulative re-estimate of the statistics), a layer
`_evalundone` already reported, a layer whose part holds only normalization weights (the
features it normalizes are trained), and a layer whose statistics had taken in fewer than
`PRETRAINED_BATCHES` batches when first seen frozen (`num_batches_tracked`: a randomly initialized
backbone used as a random-feature extractor has no estimated statistics to keep; its running
statistics need the data, the PyTorch transfer-learning tutorial's adaptation in the clean set).
Cost: at judged steps only, a walk of each trained model's modules and parameters (Python
attributes); the copies once per layer; one read per layer at the end.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import nn

from .._findings import Finding
from .._frames import UserFrame, user_frame_from_stack
from ._evalundone import EvalUndone
from ._normstats import Drifted, Kept, finding, keeps_stats

PRETRAINED_BATCHES = 10


def _has_weight(part: nn.Module) -> bool:
    """`part` holds a parameter of a module that is not a normalization layer."""
    return any(not isinstance(m, nn.modules.batchnorm._NormBase) and any(True for _ in m.parameters(recurse=False))
               for m in part.modules())


class FrozenPart:
    def __init__(self, session: Any, undone: EvalUndone) -> None:
        self.session = session
        self.undone = undone
        self.kept: dict[int, Kept] = {}  # id(layer) -> its statistics when first seen in a frozen part
        self.dropped: set[int] = set()  # layers whose part was found trainable at a judged step
        self.bare: set[int] = set()  # models with no normalization layer keeping statistics

    def step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        held = {id(p) for g in optimizer.param_groups for p in g["params"]}
        every: set[int] | None = None
        for model in self.session.models:
            if id(model) in self.bare or not any(p.requires_grad and id(p) in held for p in model.parameters()):
                continue
            if every is None:
                every = {id(p) for o in self.session.optimizers for g in o.param_groups for p in g["params"]}
            if all(p.requires_grad and id(p) in every for p in model.parameters()):
                continue  # nothing of it is frozen
            self._scan(model, every)

    def _scan(self, model: nn.Module, every: set[int]) -> None:
        named = dict(model.named_modules())
        layers = [(n, m) for n, m in named.items() if n and keeps_stats(m)]
        if not layers:
            self.bare.add(id(model))
            return
        memo: dict[str, bool] = {}

        def frozen(name: str) -> bool:
            if name not in memo:
                memo[name] = not any(p.requires_grad and id(p) in every for p in named[name].parameters())
            return memo[name]

        frame: UserFrame | None = None
        for name, m in layers:
            if id(m) in self.dropped or not m.training or m.momentum is None:
                continue
            parts = name.split(".")
            top = next((".".join(parts[:i]) for i in range(1, len(parts) + 1) if frozen(".".join(parts[:i]))), None)
            if top is None or not _has_weight(named[top]):
                if id(m) in self.kept:  # the part trains now: unfrozen, or toggled (a GAN's discriminator)
                    del self.kept[id(m)]
                    self.dropped.add(id(m))
                continue
            if id(m) in self.kept:
                continue
            part = named[top]
            frame = frame or user_frame_from_stack(1)
            self.kept[id(m)] = Kept.of(
                m, part=weakref.ref(part), part_name=top, model=weakref.ref(model), step=self.session.step,
                frame=frame, versions=[(weakref.ref(p), p._version) for p in part.parameters()])

    def _unchanged(self, kept: Kept) -> nn.Module | None:
        """The part, when its parameters are the ones seen, at the versions seen, still frozen."""
        part = kept.extra["part"]()
        if part is None:
            return None
        every = {id(p) for o in self.session.optimizers for g in o.param_groups for p in g["params"]}
        now = list(part.parameters())
        seen = [(ref(), v) for ref, v in kept.extra["versions"]]
        if len(now) != len(seen) or any(p is not q or q._version != v for p, (q, v) in zip(now, seen)):
            return None
        if any(p.requires_grad and id(p) in every for p in now):
            return None
        return part

    def end(self) -> list[Finding]:
        by_model: dict[int, list[tuple[Drifted, Kept]]] = {}
        for key, kept in self.kept.items():
            m = kept.layer()
            if m is None or key in self.undone.reported:
                continue
            part = self._unchanged(kept)
            if part is None or self.undone.trained_inside(part):
                continue
            moved = kept.moved()
            if moved is None or not moved.harm or moved.before < PRETRAINED_BATCHES:
                continue  # (statistics never estimated before the freeze: nothing pretrained to keep)
            name = self.session.module_name(m) or type(m).__name__
            model = kept.extra["model"]()
            by_model.setdefault(id(model), []).append((Drifted(m, name, kept.extra["part_name"], moved), kept))
        out = []
        for rows in by_model.values():
            layer, kept = rows[0][0].layer, rows[0][1]
            model = kept.extra["model"]()
            train_at = self.undone.last_train(layer)
            frame = train_at or kept.extra["frame"]
            label = (self.session.model_label(model) if model is not None else None) or "the model"
            steps = max(0, self.session.step - min(k.extra["step"] for _, k in rows))
            params = len({id(ref()) for _, k in rows for ref, _ in k.extra["versions"] if ref() is not None})
            out.append(finding(
                "frozen_norm.train_mode", [r for r, _ in rows], frame, {"model": label, "steps": steps},
                {"model": label, "frozen_since_step": min(k.extra["step"] for _, k in rows),
                 "optimizer_steps_since": steps, "frozen_parameters_unchanged": True,
                 "frozen_parameter_tensors": params,
                 "train_line": f"{frame.file}:{frame.line}" if frame is not None else None,
                 "line_is": "the last train() call" if train_at is not None else "the optimizer step"}))
        return out
