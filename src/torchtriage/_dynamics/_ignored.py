"""A metric over positions the training leaves out: an accuracy that counts ignored or padding
targets.

The loss of a token task excludes some target positions: those equal to its `ignore_index`
(`-100` by default in `cross_entropy` / `nll_loss`, set by a collator or by hand at padding).
A metric computed on the same targets must exclude them too: `(pred == tgt).sum() / tgt.numel()`
compares every ignored position with a prediction (a class id, never `-100`) and counts it as
wrong, so a perfect model reads the share of real tokens. Padding the model itself marks as
padding (an `nn.Embedding(padding_idx=p)`), at the end of each target row, is the same when
the metric counts it: the model predicts it trivially and the metric reads mostly the padding.

Seen at run time in the dynamics check's metric region (`_evalcode.MetricRegion`: the ops after a
watched root's forward, on the first training steps and evaluation passes): an `==` / `!=`
between a tensor computed from the model's output and an integer target tensor is a candidate.
Its ignored positions are the target's values equal to an `ignore_index` of the run's
`cross_entropy` / `nll_loss` calls, or, for a target of two or more dimensions, equal to an
embedding's `padding_idx` and only at the end of their rows. The measurement is counterfactual:
the ops that follow the comparison are replayed (as the broadcast check replays them) with the
comparison's result flipped at the ignored positions, to the last number computed from it (a 0-d
tensor). A metric that excludes them (`(eq & keep).sum() / keep.sum()`, `eq[keep]`) gives the same
number; one that counts them moves. A prediction never equals an ignore value (`-100`), so there
a count of matches is right whatever it sums over, and only a denominator over every position is
wrong: judged when the number computed is the share over all positions (`eq.float().mean()`,
`eq.sum() / eq.numel()`); a count whose denominator is kept in Python is left alone. The
evidence: the metric as computed and with the flip, the match rate over all positions and over
the kept ones, the share ignored. Severity: `error` for
positions the loss ignores (the loss and the metric disagree on what is a target) when the two
match rates differ by at least `MOVE` (a point of accuracy); `warning` for padding the loss also
counts; below `MOVE`, nothing. Cost: the region's candidates only (its windows are the first
steps); one host read per region that holds a candidate.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn as nn
from torch.utils import _pytree as pytree

from .._catalogue import msg
from .._findings import Finding, Severity
from .._frames import UserFrame
from .._replayable import replayable
from ._common import finding, num

MOVE = 0.01
MOST = 4  # candidates judged per region


@dataclasses.dataclass
class Compare:
    index: int  # position of the comparison in the region's ops
    op: str  # "eq" / "ne"
    target: torch.Tensor
    out: torch.Tensor
    frame: UserFrame | None


def candidate(name: str, a: Any, b: Any, from_model: list[bool], out: Any, index: int,
              frame: UserFrame | None) -> Compare | None:
    """An `==` / `!=` of a prediction with an integer target of the same shape (or broadcast to it)."""
    if name not in ("eq", "ne", "__eq__", "__ne__") or not isinstance(out, torch.Tensor) or out.dtype != torch.bool:
        return None
    target = b if from_model[0] else a
    if not isinstance(target, torch.Tensor) or target.is_floating_point() or target.is_complex() \
            or target.dtype == torch.bool or target.numel() < 2 or target.dim() == 0:
        return None
    if tuple(target.shape) != tuple(out.shape):
        return None
    return Compare(index, "eq" if "eq" in name else "ne", target.detach(), out, frame)


def padding_ids(models: list[nn.Module]) -> set[int]:
    out: set[int] = set()
    for m in models:
        for mod in m.modules():
            if isinstance(mod, nn.Embedding) and mod.padding_idx is not None:
                out.add(int(mod.padding_idx) % mod.num_embeddings)
    return out


@torch.no_grad()
def judge(region: Any, compares: list[Compare], ignore: set[int], pads: set[int], step: int | None,
          reported: set[Any], defer: Any) -> None:
    """Queue the comparisons' numbers on `defer(tensors, callback)` (they ride the step's one
    read); `callback(floats)` returns the findings."""
    plans: list[tuple[Compare, Any, list[torch.Tensor]]] = []
    for c in compares:
        key = ("ignored", c.frame)
        if key in reported or len(plans) >= MOST:
            continue
        t = c.target
        ign_loss = torch.zeros_like(t, dtype=torch.bool)
        for v in ignore:
            ign_loss |= t == v
        ign_pad = torch.zeros_like(t, dtype=torch.bool)
        if t.dim() >= 2:
            for p in pads:
                m = t == p
                trailing = m.flip(-1).cumprod(-1).flip(-1).bool()  # the run of p at the end of each row
                ign_pad |= torch.where((m == trailing).all(), trailing, torch.zeros_like(m))
        ign = ign_loss | ign_pad
        match = c.out if c.op == "eq" else ~c.out
        flipped = torch.where(ign, ~c.out, c.out)
        computed, moved = replay(region, c, flipped)
        if computed is None or moved is None:
            continue  # no number was computed from the comparison: not a metric
        keep = ~ign
        numbers = [ign_loss.sum(), ign_pad.sum(), torch.tensor(float(t.numel()), device=t.device),
                   match.float().mean(), (match & keep).sum() / keep.sum().clamp_min(1), computed, moved,
                   c.out.float().mean()] + [(t == v).any() for v in sorted(ignore)]  # which values it holds
        plans.append((c, key, numbers))
    if not plans:
        return
    dev = plans[0][0].target.device
    flat = [torch.as_tensor(x, dtype=torch.float64, device=dev).reshape(()) for _, _, nums in plans for x in nums]
    defer(flat, lambda values: _decide(region, plans, values, ignore, pads, step, reported))


def _decide(region: Any, plans: list[tuple[Compare, Any, list[torch.Tensor]]], values: list[float],
            ignore: set[int], pads: set[int], step: int | None, reported: set[Any]) -> list[Finding]:
    width = len(plans[0][2])
    found = []
    for i, (c, key, _) in enumerate(plans):
        row = values[width * i:width * (i + 1)]
        n_loss, n_pad, n, rate_all, rate_kept, computed_v, moved_v, true_share = row[:8]
        held = [v for v, there in zip(sorted(ignore), row[8:]) if there]
        if not (n_loss or n_pad) or computed_v == moved_v or abs(rate_all - rate_kept) < MOVE:
            continue
        if n_loss and not _close(computed_v, true_share):
            # A prediction never equals the ignore value, so a count of matches is right: only a
            # denominator over every position is wrong, and it shows when the number computed is
            # the share over all positions (a mean, a sum over numel); a sum whose denominator
            # is kept elsewhere is not judged.
            continue
        reported.add(key)
        by_loss = n_loss > 0
        kind = "loss" if by_loss else "pad"
        what = (f"ignore_index {held[0]}" if by_loss
                else f"padding_idx {sorted(pads)[0] if len(pads) == 1 else sorted(pads)}")
        ignored = int(n_loss + n_pad)
        found.append(finding(
            "silent.metric_counts_ignored", severity=Severity.ERROR if by_loss else Severity.WARNING, step=step,
            op=c.op, frame=c.frame, cause=f"silent.metric_counts_ignored.cause_{kind}",
            ignored=ignored, n=int(n), kind=msg(f"silent.metric_counts_ignored.kind_{kind}"),
            share=f"{ignored / max(n, 1):.0%}", what=what, computed=num(computed_v),
            moved=num(moved_v), rate_all=num(rate_all), rate_kept=num(rate_kept),
            evidence={"target_shape": tuple(c.target.shape), "ignored_positions": ignored, "positions": int(n),
                      "ignored_by": what, "metric_computed": num(computed_v),
                      "metric_with_ignored_flipped": num(moved_v), "match_rate_all_positions": num(rate_all),
                      "match_rate_kept_positions": num(rate_kept),
                      "in": "evaluation" if region.evaluation else "training step"}))
    return found


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-5 * max(1.0, abs(a), abs(b))


def replay(region: Any, c: Compare, flipped: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The last 0-d tensor computed from the comparison in the region (the metric as the code
    has it: a sum, then its division), as computed and with `flipped` in its place (the ops
    after it replayed; none in place)."""
    env: dict[int, Any] = {id(c.out): flipped}
    last: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)
    for func, args, kwargs, out in region.ops[c.index + 1:]:
        leaves = pytree.tree_leaves((args, kwargs))
        if not any(isinstance(x, torch.Tensor) and id(x) in env for x in leaves):
            continue
        if not replayable(func):
            return last  # (in place, or a collective)
        a2, k2 = pytree.tree_map(lambda x: env.get(id(x), x) if isinstance(x, torch.Tensor) else x, (args, kwargs))
        with region.session.paused():
            new = func(*a2, **k2)
        for old_t, new_t in zip(pytree.tree_leaves(out), pytree.tree_leaves(new)):
            if isinstance(old_t, torch.Tensor):
                env[id(old_t)] = new_t
        if isinstance(out, torch.Tensor) and out.dim() == 0 and isinstance(new, torch.Tensor) and new.dim() == 0:
            last = (out.detach(), new.detach())
    return last
