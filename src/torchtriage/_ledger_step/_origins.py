"""Weights loaded from a copy that is still mostly the initialization of the model trained here.

Every correct run that keeps an averaged copy of its model (an EMA, Polyak averaging, a
"shadow" or teacher copy) and then saves or evaluates it hands over weights that followed the
training: the copy's horizon, 1 / (1 - decay) updates, is shorter than the updates it got. A
decay of 0.9998 with no warm-up moves the copy 1 - 0.9998^200 = 4 % of the way in 200 updates:
what is saved is 96 % the random initialization.

At an optimizer's construction (`on_optimizer`: before its first step) a slice of at most
`SLICE` elements of each of its first `TENSORS` parameters is copied: their initialization.
At a `load_state_dict(sd)` (the outermost call), every tensor of `sd` whose key and shape are
those of a noted parameter, under the parameter's own model, is compared on those slices:

    moved   = |sd - init|      how far the loaded weights are from the initialization
    trained = |now - init|     how far training moved the parameter

A finding when the loaded weights moved off the initialization (not an exact reset to it, as a
k-fold loop does) by less than `SHARE` of what training moved the model, after at least
`MIN_STEPS` optimizer steps: the load puts a model at mostly-initial weights. The share itself
is the harm, measured on this run's tensors. One read per load (not a hot path).

Unless the loaded weights are the trained model's own weights at an earlier step: a best
checkpoint chosen by early stopping (`best = copy.deepcopy(model.state_dict())` at the best
epoch, `torch.save(model.state_dict(), ...)`) may be an early one, and is then close to the
initialization for a good reason: the validation score chose it. Every outermost `state_dict()`
of a model holding noted parameters records, at most once a step, each noted tensor's distance
from its initialization (a small device vector, no read); a load whose distances are those of
one such record, tensor for tensor, restores a point of the training trajectory, not a copy that
lagged behind it (an EMA's weights are no point of it).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.parameter import is_lazy

from .._distributed._shards import local_shards
from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import user_frame_from_stack

SLICE = 1024
TENSORS = 64
KEEP = 8  # optimizers whose initial slices are kept
TRAIL = 256  # the model's own state_dict() records kept (the latest)
MATCH = 1e-4  # relative: a record's distance and the loaded one's agree this closely
SHARE = 0.25  # loaded weights that moved less than this share of the trained ones are mostly init
MIN_STEPS = 20
TINY = 1e-6  # relative: an exact reset (or a copy of the init) moved nothing


@dataclass
class _Origin:
    param: weakref.ref[torch.Tensor]
    init: torch.Tensor  # a detached copy of the first SLICE elements


def _slice(t: torch.Tensor) -> torch.Tensor:
    (local,) = local_shards([t.detach()])  # (a `fully_shard` DTensor: its rank's shard)
    return local.reshape(-1)[:SLICE]


class Origins:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.by_opt: list[tuple[weakref.ref[torch.optim.Optimizer], dict[int, _Origin], int]] = []
        self.reported = False
        # (id(param) -> position, distances from the initialization) at the model's state_dict() calls
        self.trail: list[tuple[dict[int, int], torch.Tensor]] = []
        self.last_taken: dict[int, int] = {}  # id(module) -> the step of its latest record

    def _origins(self) -> dict[int, _Origin]:
        return {k: o for _, noted, _ in self.by_opt for k, o in noted.items()}

    def taken(self, module: torch.nn.Module) -> None:
        """`module.state_dict()` was called: record its noted parameters' distances from their
        initialization (once a step), a point of the trajectory a later load may restore."""
        if not self.by_opt or self.reported or self.last_taken.get(id(module)) == self.session.step:
            return
        origins = self._origins()
        params = [(p, o) for p in module.parameters() if (o := origins.get(id(p))) is not None][:TENSORS]
        if not params:
            return
        self.last_taken[id(module)] = self.session.step
        with torch.no_grad():
            dist = torch.stack([(_slice(p) - o.init).abs().sum() for p, o in params])
        self.trail.append(({id(p): i for i, (p, _) in enumerate(params)}, dist))
        self.trail = self.trail[-TRAIL:]

    def built(self, opt: torch.optim.Optimizer) -> None:
        noted: dict[int, _Origin] = {}
        with torch.no_grad():
            for g in opt.param_groups:
                for p in g["params"]:
                    if isinstance(p, torch.Tensor) and not is_lazy(p) and p.is_floating_point() \
                            and p.numel() > 1 and len(noted) < TENSORS:  # (a LazyLinear's weight has no size yet)
                        noted[id(p)] = _Origin(weakref.ref(p), _slice(p).clone())
        if noted:
            self.by_opt.append((weakref.ref(opt), noted, self.session.step))
            self.by_opt = self.by_opt[-KEEP:]

    def _named(self) -> dict[str, list[tuple[torch.Tensor, _Origin, int]]]:
        """Parameter name (as its model's state_dict names it) -> noted parameters."""
        out: dict[str, list[tuple[torch.Tensor, _Origin, int]]] = {}
        origins = {}
        for _, noted, at in self.by_opt:
            for k, o in noted.items():
                origins[k] = (o, at)
        for m in self.session.models:
            for name, p in m.named_parameters():
                hit = origins.get(id(p))
                if hit is not None:
                    out.setdefault(name, []).append((p, hit[0], hit[1]))
        return out

    def _restores_a_point(self, params: list[torch.Tensor], moved: list[float]) -> bool:
        """Do the loaded tensors' distances from the initialization equal one record of the trail?"""
        usable = [(index, dist) for index, dist in self.trail if all(id(p) in index for p in params)]
        if not usable:
            return False
        with torch.no_grad():
            values = torch.cat([d.to(usable[0][1].device) for _, d in usable]).tolist()
        at = 0
        for index, dist in usable:
            record = values[at:at + dist.numel()]
            at += dist.numel()
            if all(abs(m - record[index[id(p)]]) <= MATCH * max(abs(record[index[id(p)]]), 1e-12)
                   for p, m in zip(params, moved)):
                return True
        return False

    def judge(self, module: torch.nn.Module, state_dict: Mapping[str, Any]) -> Finding | None:
        if self.reported or not self.by_opt:
            return None
        named = self._named()
        pairs = []
        for key, value in state_dict.items():
            if not isinstance(value, torch.Tensor) or not value.is_floating_point():
                continue
            for p, origin, at in named.get(key, ()):
                if p.shape == value.shape and value.data_ptr() != p.data_ptr() \
                        and self.session.step - at >= MIN_STEPS:
                    pairs.append((key, value, p, origin))
                    break
        if not pairs:
            return None
        with torch.no_grad():
            rows = torch.stack([torch.stack([(_slice(v).to(o.init.device, o.init.dtype) - o.init).abs().sum(),
                                             (_slice(p) - o.init).abs().sum(), o.init.abs().sum()])
                                for _, v, p, o in pairs])
        per_pair = rows.tolist()
        moved, trained, size = (sum(r[i] for r in per_pair) for i in range(3))
        if trained <= TINY * max(size, 1.0) or moved <= TINY * max(size, 1.0):
            return None  # training moved nothing, or the load is the initialization itself (a reset)
        share = moved / trained
        if share >= SHARE:
            return None
        if self._restores_a_point([p for _, _, p, _ in pairs], [r[0] for r in per_pair]):
            return None  # the model's own weights at an earlier step: a best checkpoint, early stopping
        self.reported = True
        frame = user_frame_from_stack(3)
        model = type(module).__name__
        ev = {"tensors_compared": len(pairs), "examples": [k for k, _, _, _ in pairs[:4]],
              "moved_from_init": round(moved, 6), "trained_from_init": round(trained, 6),
              "share_of_training": round(share, 4), "optimizer_steps": self.session.step,
              "harm": f"the loaded weights moved {share:.1%} of the way from the initialization to the weights "
                      f"training reached: {1 - share:.0%} of the way is still the initialization"}
        return from_catalogue(Category.OTHER, "checkpoint.mostly_init", "checkpoint.mostly_init",
                              fields={"model": model, "share": f"{share:.1%}", "rest": f"{1 - share:.0%}",
                                      "tensors": len(pairs), "steps": self.session.step},
                              cause_key="checkpoint.mostly_init.cause", next_key="checkpoint.mostly_init.next",
                              frame=frame, evidence=ev, source_line=True, severity=Severity.WARNING,
                              stage=Stage.PARAMETER, module=model, op="load_state_dict")
