"""Severity from harm for parameters that get no gradient (issue 24).

A parameter that no forward uses (`gradient.unused`) or that no loss reaches
(`gradient.unreached`) costs nothing by itself: the model a user wrote often owns parts a given
loop does not call (a projector built for another objective, GIN's `eps` with `learn_eps=False`,
a head for another task). It is a `warning` only when this run shows that the user expected it
to train and lost something:

  * the optimizer that holds it trains nothing else (every trainable parameter it holds gets no
    gradient): the run's updates do nothing at all;
  * the loss did not fall: the median of the run's last 10 losses is not below the median of its
    first 10 by more than 2 % and by more than twice the two windows' spread (so that batches of
    different difficulty are no progress);
  * the loss was not measured (no loss series, or fewer than 20 losses): no evidence either
    way, so the finding stays as the gradient check made it.

Otherwise the run learned without those parameters: an `info`, with the loss numbers as
evidence a user can check. A gradient exactly zero over the whole run (`gradient.zero`, once
`_zero_later` has seen no non-zero gradient) is judged the same way: a parameter that sits
behind a constant (a softmax over a dimension of size 1, an attention over one sampled
neighbour) never learns, and that is harm only when the run did not learn either.
"""

from __future__ import annotations

import math
import statistics

from .._findings import Finding, Severity

JUDGED = ("gradient.unused", "gradient.unreached", "gradient.zero")
WINDOW = 10  # losses at the start and at the end of the run


def loss_fell(losses: list[float | None]) -> tuple[bool, float, float] | None:
    """(fell, first, last) over the run's losses, or None when too few are known."""
    values = [v for v in losses if v is not None and math.isfinite(v)]
    if len(values) < 2 * WINDOW or len(values) < len(losses) * 0.9:
        return None
    first, first_spread = _level(values[:WINDOW])
    last, last_spread = _level(values[-WINDOW:])
    margin = max(0.02 * abs(first), first_spread + last_spread)
    return first - last > margin, first, last


def judge(f: Finding, losses: list[float | None]) -> Finding:
    """`f` (a warning in `JUDGED`) kept, or made an `info` when the run learned without it."""
    if f.severity is not Severity.WARNING or f.code not in JUDGED:
        return f
    if f.evidence.get("optimizer_trains_nothing_else"):
        return f
    measured = loss_fell(losses)
    if measured is None:
        return f
    fell, first, last = measured
    evidence = dict(f.evidence, loss_first=_num(first), loss_last=_num(last), run_kept_learning=fell)
    return f.replace(severity=Severity.INFO if fell else Severity.WARNING, evidence=evidence)


def _level(values: list[float]) -> tuple[float, float]:
    """(median, median absolute deviation) of a window of losses."""
    mid = statistics.median(values)
    return mid, statistics.median(abs(v - mid) for v in values)


def _num(v: float) -> float:
    return float(f"{v:.4g}")
