"""Parameters that should move and did not (issue 26, parameter updates).

A parameter should move when it requires grad, an optimizer that stepped holds it and its
gradient is non-zero. Whether it did is read from its values: a sample of at most `SAMPLE`
elements (evenly spaced over the flattened tensor) is kept when the parameter is first seen with
a gradient, and at each of the first `LOOKS` judged steps of the optimizer holding it the
sampled positions whose gradient (as that optimizer reads it) is non-zero are noted (a
zero-initialised branch, LoRA's `B`, a ReZero gate: their gradient is zero until what they
depend on has moved, so they are judged only from then on). A gradient below `NOISE` of its
model's usual scale is float noise around an exact zero (a bias before a BatchNorm).
At the end each noted position is compared with its first value:

  * weights stored in bfloat16 / float16, with most noted positions unchanged: the optimizer's
    updates are smaller than the spacing of the weights' dtype and round back (a model cast with
    `.to(torch.bfloat16)` and trained with lr 1e-4);
  * any other dtype, with every noted position unchanged: the optimizer stepped but these
    values never changed (it updates another tensor, or something restores them).

A group whose learning rate is 0 is left to `gradient.lr_zero`; a parameter no optimizer holds,
or held by one that never stepped, to the gradient check (`not_in_optimizer`, `optimizer_idle`).
Cost: per parameter, two gathers and a maximum at each of the first `LOOKS` judged steps;
one compare and one read at the end. No device read before the end.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack

SAMPLE = 32
LOOKS = 8  # judged backwards whose non-zero gradient positions are noted
MIN_STEPS = 3  # judged steps of the holding optimizer before its parameters are judged
LOW = (torch.bfloat16, torch.float16)
LOW_SHARE = 0.5  # low-precision weights: this share of the noted positions unchanged
NOISE = 1e-3  # a gradient below this share of its model's scale is float noise around an exact 0


@dataclasses.dataclass
class _Track:
    ref: weakref.ref[torch.Tensor]
    dtype: torch.dtype
    index: torch.Tensor
    start: torch.Tensor
    gmax: torch.Tensor  # the largest |gradient| seen at each sampled position


def _sample(t: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).index_select(0, index)


def _dtensor(t: torch.Tensor) -> bool:
    return isinstance(getattr(t, "_local_tensor", None), torch.Tensor)


class UpdateWatch:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.tracked: dict[int, _Track] = {}
        self.steps: dict[int, int] = {}  # id(optimizer) -> judged steps
        self.frames: dict[int, UserFrame | None] = {}  # id(optimizer) -> the line of its first step
        self.looks: dict[int, int] = {}  # id(optimizer) -> judged steps whose gradients were sampled

    def step_pre(self, opt: torch.optim.Optimizer) -> None:
        """`opt` is about to step: the gradients it will apply, at its first `LOOKS` judged steps."""
        seen = self.looks.get(id(opt), 0)
        if seen >= LOOKS:
            return
        self.looks[id(opt)] = seen + 1
        with torch.no_grad():
            for group in opt.param_groups:
                for p in group["params"]:
                    if not isinstance(p, torch.Tensor) or not p.requires_grad or p.grad is None \
                            or not p.is_floating_point() or not p.numel() or _dtensor(p) \
                            or p.grad.layout is not torch.strided or p.grad.shape != p.shape:
                        continue
                    t = self.tracked.get(id(p))
                    if t is None or t.ref() is not p or t.dtype != p.dtype:
                        n = p.numel()
                        index = torch.linspace(0, n - 1, min(n, SAMPLE), device=p.device).long()
                        t = _Track(weakref.ref(p), p.dtype, index, _sample(p, index).clone(),
                                   torch.zeros(index.numel(), dtype=torch.float32, device=p.device))
                        self.tracked[id(p)] = t
                    torch.maximum(t.gmax, _sample(p.grad, t.index).abs().float(), out=t.gmax)

    def stepped(self, opt: torch.optim.Optimizer) -> None:
        self.steps[id(opt)] = self.steps.get(id(opt), 0) + 1
        if id(opt) not in self.frames:
            self.frames[id(opt)] = user_frame_from_stack(3)

    # ------------------------------------------------------------------ judging
    def end(self) -> list[Finding]:
        sess = self.session
        if not self.tracked:
            return []
        optimizers = sess.optimizers
        rows = []
        with torch.no_grad():
            for t in self.tracked.values():
                p = t.ref()
                if p is None or p.dtype != t.dtype:
                    continue
                info = sess.param_index.info(p)
                if info is None or info.optimizer is None or info.optimizer >= len(optimizers):
                    continue
                opt = optimizers[info.optimizer]
                if self.steps.get(id(opt), 0) < MIN_STEPS:
                    continue
                group = opt.param_groups[info.group or 0]
                lr = group.get("lr", None)
                if isinstance(lr, (int, float)) and lr == 0:
                    continue
                rows.append((p, info, opt, lr, t))
        if not rows:
            return []
        with torch.no_grad():
            # a gradient counts only above a share of its model's usual scale (the median over its
            # parameters of the largest sampled |gradient|): a bias before a BatchNorm, a critic's
            # last bias under mean(fake) - mean(real) get float noise where the exact gradient is 0
            peaks = torch.stack([r[4].gmax.max().cpu() for r in rows]).tolist()
            by_root: dict[int, list[float]] = {}
            for r, peak in zip(rows, peaks):
                by_root.setdefault(r[1].root, []).append(peak)
            scale = {root: sorted(v)[len(v) // 2] for root, v in by_root.items()}
            counts_t = []
            for p, info, _, _, t in rows:
                moving = t.gmax > NOISE * scale[info.root]
                same = (_sample(p, t.index) == t.start) & moving
                counts_t.append(torch.stack([moving.sum(), same.sum()]).cpu())
            counts = torch.stack(counts_t).tolist()
        groups: dict[tuple[int, int, bool], list[tuple[Any, ...]]] = {}
        for (p, info, opt, lr, _), (noted, same) in zip(rows, counts):
            if not noted:
                continue
            low = p.dtype in LOW
            if (low and same >= LOW_SHARE * noted) or (not low and same == noted):
                groups.setdefault((info.root, id(opt), low), []).append((p, info, opt, lr, int(noted), int(same)))
        return [self._finding(items, low) for (_, _, low), items in groups.items()]

    def _finding(self, items: list[tuple[Any, ...]], low: bool) -> Finding:
        sess = self.session
        p, info, opt, lr, _, _ = items[0]
        names = [i.qualname for _, i, _, _, _, _ in items]
        noted = sum(it[4] for it in items)
        same = sum(it[5] for it in items)
        share = f"{100 * same / max(noted, 1):.0f}%"
        steps = self.steps.get(id(opt), 0)
        model = info.label or "the model"
        with torch.no_grad():
            w = float(p.detach().abs().float().median()) if p.numel() else 0.0
        spacing = torch.finfo(p.dtype).eps * w
        evidence: dict[str, Any] = {
            "parameters": names[:8], "count": len(items), "dtype": str(p.dtype).replace("torch.", ""),
            "optimizer": type(opt).__name__, "lr": lr, "judged_steps": steps,
            "sampled_values_with_gradient": noted, "unchanged": same, "unchanged_share": share,
            "median_abs_weight": round(w, 6), "dtype_spacing_there": float(f"{spacing:.3g}")}
        if info.label:
            evidence["model"] = info.label
        fields = {"count": len(items), "model": model, "first": names[0], "opt": type(opt).__name__,
                  "steps": steps, "share": share, "dtype": evidence["dtype"], "lr": lr,
                  "w": f"{w:.3g}", "spacing": f"{spacing:.2g}"}
        variant = "low" if low else "still"
        frame = self.frames.get(id(opt))
        return from_catalogue(Category.DTYPE if low else Category.GRADIENT,
                              "dtype.updates_rounded_away" if low else "gradient.not_moved",
                              f"ledger.not_moved.{variant}", fields=fields,
                              cause_key=f"ledger.not_moved.{variant}.cause",
                              next_key=f"ledger.not_moved.{variant}.next",
                              frame=frame, evidence=evidence, source_line=frame is not None,
                              severity=Severity.WARNING, stage=Stage.OPTIMIZER, step=sess.step,
                              module=info.module, parameter=names[0])
