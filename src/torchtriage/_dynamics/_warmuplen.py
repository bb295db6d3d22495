"""A warm-up that takes most of the run (session 16).

A warm-up is short next to the schedule it opens (transformers' `warmup_ratio` 0.03-0.1, a few
epochs of a hundred): it keeps the first updates small, then the run trains at its peak lr and
decays. A warm-up that lasts most of the schedule (a warm-up fraction of 0.9 where 0.1 was
meant, a warm-up counted in samples against a total counted in iterations) trains most of the
run at a fraction of its lr and leaves the decay a few steps.

Read at the run's end from the clock optimizer's lr series (`session.health`, "lr") and the loss
series ("loss"), both already recorded each step. Judged only when the whole schedule was seen:

  * the lr rose (non-decreasing on >= 90 % of the steps, its midpoint >= 1/4 of the peak: a linear
    or cosine ramp, not an lr range test's exponential sweep) from <= half its peak to its peak,
    over >= 75 % of the run's optimizer steps;
  * after the peak the lr fell to <= half of it by the run's last step: the decay came, so the run
    is the schedule's length. A warm-up longer than a run cut short never decays: not judged.

The harm is measured on the loss: over the second half of the warm-up (lr from half its peak up)
the loss fell by a larger share (1.25x, in log terms) than over its first half, as many steps at a
lower lr. A loss that falls faster
as the lr rises was held back by the lr: the steps of the warm-up's first half were partly spent.
A run whose loss fell most at the start (the usual curve) is not reported.
"""

from __future__ import annotations

import math
import statistics

from .._findings import Category, Finding, Stage
from .._frames import UserFrame
from ._common import finding, num

Point = tuple[int, "float | None"]

MIN_STEPS = 20
SHARE = 0.75  # of the run's optimizer steps spent warming up
RISING = 0.9  # share of the warm-up's steps whose lr did not fall
WINDOW = 5  # losses in each level compared
FASTER = 1.25  # the second half's fall, in log terms, against the first's


def long_warmup(lrs: list[Point], losses: list[Point], frame: UserFrame | None) -> Finding | None:
    """`lrs` / `losses`: (step, value) of the clock optimizer's first group lr and of the loss."""
    lr = [(s, v) for s, v in lrs if v is not None]
    n = len(lr)
    if n < MIN_STEPS:
        return None
    peak = max(v for _, v in lr)
    if not peak > 0:
        return None
    top = next(i for i, (_, v) in enumerate(lr) if v >= 0.95 * peak)  # where the warm-up ends
    if top < SHARE * n or lr[0][1] > 0.5 * peak or lr[-1][1] > 0.5 * peak or top + 1 >= n:
        return None  # short, no warm-up, or no decay seen (a run cut short)
    ramp = lr[:top + 1]
    rises = sum(1 for a, b in zip(ramp, ramp[1:]) if b[1] >= a[1])
    if rises < RISING * (len(ramp) - 1) or ramp[top // 2][1] < 0.25 * peak:
        return None  # not a ramp (or an exponential sweep: an lr range test)
    first_step, mid_step, top_step = ramp[0][0], ramp[top // 2][0], ramp[top][0]
    loss = [(s, v) for s, v in losses if v is not None]
    first = [v for s, v in loss if first_step <= s < mid_step]
    second = [v for s, v in loss if mid_step <= s <= top_step]
    if len(first) < 2 * WINDOW or len(second) < 2 * WINDOW:
        return None
    levels = [statistics.median(w) for w in (first[:WINDOW], first[-WINDOW:], second[:WINDOW], second[-WINDOW:])]
    if min(levels) <= 0:
        return None  # (a loss that is no positive error: its falls are not comparable as shares)
    drop1, drop2 = 1 - levels[1] / levels[0], 1 - levels[3] / levels[2]  # the share each half took off
    if not (drop2 > 0 and math.log1p(-min(drop2, 0.999)) < FASTER * math.log1p(-min(max(drop1, 0.0), 0.999))):
        return None  # the loss fell as fast while the lr was low: the warm-up cost nothing measured
    share = (top + 1) / n
    return finding("warmup_most_of_run", category=Category.OTHER, stage=Stage.OPTIMIZER, step=top_step,
                   frame=frame, op="lr", steps=top + 1, total=n, share=f"{share:.0%}", peak=num(peak),
                   end=num(lr[-1][1]), left=n - top - 1, drop1=f"{drop1:.0%}", drop2=f"{drop2:.0%}",
                   evidence={"warmup_steps": top + 1, "optimizer_steps": n, "warmup_share": f"{share:.0%}",
                             "lr_first": num(lr[0][1]), "lr_peak": num(peak), "lr_last": num(lr[-1][1]),
                             "loss_levels": [num(v) for v in levels],
                             "loss_fall_first_half_of_warmup": f"{drop1:.1%}",
                             "loss_fall_second_half_of_warmup": f"{drop2:.1%}",
                             "harm": f"the loss fell by {drop1:.0%} over the warm-up's first half and by "
                                     f"{drop2:.0%} over its second: the lr held training back for {share:.0%} "
                                     "of the run"})
