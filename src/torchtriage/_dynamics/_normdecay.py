"""Normalization scales left in the decayed group by a no-decay split that exempts 1-D tensors.

A program that splits its parameters into a decayed and a `weight_decay=0` group, and puts only
1-D tensors (biases, norm scales) into the undecayed one, declares its intent: no decay on the
1-D parameters. Normalization scales (the `weight` of a LayerNorm / RMSNorm / BatchNorm /
GroupNorm) still in the decayed group are the name test missing them (`"LayerNorm.weight"`
against OPT's `self_attn_layer_norm.weight`, LLaMA's `input_layernorm.weight`). Decay pulls
these gains toward 0 every step, against the gradient.

Found once per optimizer at its first step (group numbers, shapes, module types). The harm is
measured (decoupled decay, AdamW, or SGD; an Adam-like L2 decay is scaled by the adaptive step
and stays an info): the decay's cumulative pull on those scales (the sum of lr x weight_decay over the
steps, times their magnitude) against how far training moved them (one read at the run's end,
of a copy of at most MAX_ELEMENTS elements taken at the first step). A warning when the decay
is at least a tenth of the scales' whole change, else an info.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from .._findings import Category, Finding, Severity, Stage
from .._frames import UserFrame
from ._common import finding, num

MAX_ELEMENTS = 1 << 20
SHARE = 0.1  # the decay's pull, as a share of the scales' change, that counts as harm
_NORMS: tuple[type, ...] = tuple(c for c in (nn.LayerNorm, nn.GroupNorm, getattr(nn, "RMSNorm", None),
                                             nn.modules.batchnorm._NormBase) if isinstance(c, type))
_COUPLED = ("Adam", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta")  # L2 through the adaptive step


_NORM_NAME = re.compile(r"(Norm|Normali[sz]ation)\d*[dD]?$")  # LlamaRMSNorm, LayerNormalization, LayerNorm2d


def _is_norm(m: nn.Module) -> bool:
    return isinstance(m, _NORMS) or _NORM_NAME.search(type(m).__name__) is not None


@dataclass
class MissedScales:
    """Norm scales in the decayed group of an optimizer whose undecayed group holds 1-D tensors only."""

    optimizer: str
    group: int  # the decayed group holding them
    wd: float
    names: list[str]
    params: list[torch.Tensor]  # (1-D scales: held until the run's end, a few KB)
    start: list[torch.Tensor]  # their values at the first step (detached copies)
    free: int  # 1-D tensors in the weight_decay=0 groups
    free_examples: list[str]
    decayed_vectors: int
    step: int
    frame: UserFrame | None
    coupled: bool
    pull: float = 0.0  # sum over steps of lr x weight_decay (the decoupled shrink of the scales)
    steps: int = field(default=0)

    def stepped(self, lrs: list[float | None]) -> None:
        lr = lrs[self.group] if self.group < len(lrs) else None
        if lr is not None:
            self.pull += lr * self.wd
            self.steps += 1

    def finding(self) -> Finding | None:
        with torch.no_grad():
            moved = sum(float((p.detach() - s).abs().sum()) for p, s in zip(self.params, self.start))
            size = sum(float(s.abs().sum()) for s in self.start)
        n = sum(s.numel() for s in self.start)
        if n == 0 or self.steps == 0:
            return None
        decay = self.pull * size / n  # the mean pull per element (decoupled: lr x wd x |p| a step)
        change = moved / n
        harm = not self.coupled and decay >= SHARE * change
        share = decay / change if change > 0 else float("inf")
        # a silent training fault (the dynamics' default category): the run goes on with the
        # gains pulled toward 0, nothing in the user's code or settings is wrong on its own
        return finding("norm_weights_decayed", category=Category.SILENT, stage=Stage.OPTIMIZER, step=self.step,
                       severity=Severity.WARNING if harm else Severity.INFO, frame=self.frame, op=self.optimizer,
                       module=self.names[0].rsplit(".", 1)[0], parameter=", ".join(self.names[:3]),
                       wd=num(self.wd), scales=len(self.names), free=self.free,
                       examples=", ".join(self.names[:3]), free_examples=", ".join(self.free_examples[:2]),
                       pull=f"{self.pull:.2%}", share=f"{share:.0%}" if change > 0 else "all",
                       optimizer=self.optimizer,
                       evidence={"weight_decay": num(self.wd), "decayed_norm_scales": self.names[:8],
                                 "decayed_norm_scale_count": len(self.names),
                                 "undecayed_1d_tensors": self.free, "undecayed_examples": self.free_examples[:4],
                                 "sum_lr_times_weight_decay": num(self.pull), "optimizer_steps": self.steps,
                                 "mean_decay_pull": num(decay), "mean_change_of_scales": num(change),
                                 "coupled_decay": self.coupled,
                                 **({"harm": f"weight decay pulled the norm scales toward 0 by {self.pull:.2%} of "
                                             f"their value, {share:.0%} of their whole change in this run"}
                                    if harm else {})})


def missed_norm_scales(session: Any, opt: Any, frame: UserFrame | None) -> MissedScales | None:
    groups = getattr(opt, "param_groups", [])
    free: list[torch.Tensor] = []
    decayed: list[tuple[int, torch.Tensor]] = []
    for gi, g in enumerate(groups):
        wd = g.get("weight_decay")
        if not isinstance(wd, (int, float)):
            return None
        params = [p for p in g.get("params", []) if isinstance(p, torch.Tensor) and p.requires_grad]
        if wd > 0:
            decayed.extend((gi, p) for p in params)
        else:
            free.extend(params)
    if not free or not decayed or any(p.dim() != 1 for p in free) or not any(p.dim() >= 2 for _, p in decayed):
        return None  # no split of 1-D tensors from the matrices (or the inverted one: `_decay`)
    scales: dict[int, str] = {}
    for m in session.models:
        for path, mod in m.named_modules():
            w = getattr(mod, "weight", None)
            if isinstance(w, torch.Tensor) and w.dim() == 1 and _is_norm(mod):
                scales[id(w)] = f"{path}.weight" if path else "weight"
    hits = [(gi, p) for gi, p in decayed if id(p) in scales and p.dim() == 1]
    if not hits:
        return None
    gi = hits[0][0]
    hits = [(g, p) for g, p in hits if g == gi]
    taken, params, start = 0, [], []
    for _, p in hits:
        if taken + p.numel() > MAX_ELEMENTS:
            break
        taken += p.numel()
        params.append(p)
        start.append(p.detach().clone())
    if not params:
        return None
    infos = session.param_index.infos()

    def name(p: torch.Tensor) -> str:
        info = infos.get(id(p))
        return info.qualname if info is not None else scales.get(id(p), "?")

    kind = type(opt).__name__
    coupled = kind in _COUPLED and not groups[gi].get("decoupled_weight_decay", False)
    return MissedScales(optimizer=kind, group=gi, wd=float(groups[gi]["weight_decay"]),
                        names=[name(p) for p in params], params=params, start=start, free=len(free),
                        free_examples=[name(p) for p in free[:4]],
                        decayed_vectors=sum(1 for _, p in decayed if p.dim() == 1), step=session.step,
                        frame=frame, coupled=coupled)
