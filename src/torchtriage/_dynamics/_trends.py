"""Detectors over per-step numbers (plain floats, already read): pure functions and small
streaming state, so each rule is testable without a training loop.

Thresholds, chosen to be quiet on correct runs (tests/zoo/clean.py) and loud on the failures:
  * divergence: >= `GROWTH_STEPS` consecutive increases multiplying the value by >= `GROWTH`
    (or >= 3 increases by >= GROWTH**2: a blow-up that reaches Inf in a few steps), to a value
    above every value kept before the growth began (a loss that dipped near 0 and climbs back
    to its usual level, as a GAN critic's hinge loss does, grew from a dip, not diverged). A
    series that took values below 0 among those kept (an objective with no floor at 0: a policy
    surrogate, an RL loss) passes near 0 on its way across: its growth is measured from its
    typical size (the median magnitude of the values kept before), not from a value near 0;
  * gradient spike: >= `SPIKE` × the median of the previous >= `SPIKE_HISTORY` norms;
  * stagnation: updates < `TINY_UPDATE` of the parameters' norm at two samples, and the loss
    not lower than at the start;
  * loss at the prior: the mean of the last `PRIOR_WINDOW` losses within `PRIOR_TOL` of the
    prior, after >= `PRIOR_MIN_STEPS` steps.
"""

from __future__ import annotations

import collections
import math
import statistics
from typing import Any

GROWTH = 100.0
GROWTH_STEPS = 5
SPIKE = 100.0
SPIKE_HISTORY = 10
TINY_UPDATE = 1e-5
PRIOR_WINDOW = 20
PRIOR_TOL = 0.03
PRIOR_MIN_STEPS = 50


def _ok(v: float | None) -> bool:
    return v is not None and math.isfinite(v) and v > 0


class Growth:
    """Geometric growth of one positive series; reports the run's start step once.

    The run of increases ending at the newest point is counted as points arrive (O(1) a
    point); it reaches back at most to the oldest of the last 128 points kept."""

    def __init__(self) -> None:
        self.points: collections.deque[tuple[int, float | None]] = collections.deque(maxlen=128)
        self.done = False
        self.run = 0  # consecutive increases (of valid values) ending at the newest point

    def add(self, step: int, value: float | None) -> dict[str, Any] | None:
        pts = self.points
        last_value = pts[-1][1] if pts else None
        pts.append((step, value))
        if not _ok(value):
            self.run = 0
            return None
        self.run = self.run + 1 if _ok(last_value) and value > last_value else 0  # type: ignore[operator]
        if self.done or self.run < 3:
            return None
        n = min(self.run, len(pts) - 1)
        start = pts[len(pts) - 1 - n]
        first, last = start[1], value
        assert first is not None and last is not None  # both passed _ok()
        kept = [v for _, v in list(pts)[: len(pts) - 1 - n] if v is not None and math.isfinite(v)]
        base = first
        if any(v < 0 for v in kept):  # no floor at 0: near 0 is a crossing, not the series' size
            base = max(first, statistics.median(abs(v) for v in kept))
        if not ((n >= GROWTH_STEPS and last / base >= GROWTH) or (n >= 3 and last / base >= GROWTH ** 2)):
            return None
        before = [v for v in kept if _ok(v)]
        if before and last <= max(before):
            return None  # back from a dip to where the series already was (a GAN's loss near 0)
        self.done = True
        return {"start": start[0], "end": step, "first": first, "last": last, "steps": n,
                "rate": (last / first) ** (1.0 / n)}


class Spikes:
    """A gradient norm far above its recent median (one step, not a trend)."""

    def __init__(self) -> None:
        self.history: collections.deque[float] = collections.deque(maxlen=50)

    def add(self, value: float | None) -> float | None:
        """The spike factor when `value` is a spike, else None."""
        if value is None or not math.isfinite(value):
            return None
        factor = None
        # (the median is at least the minimum: a value under SPIKE x the minimum is no spike)
        if len(self.history) >= SPIKE_HISTORY and value >= SPIKE * min(self.history):
            med = sorted(self.history)[len(self.history) // 2]
            if med > 0 and value >= SPIKE * med:
                factor = value / med
        self.history.append(value)
        return factor


def loss_not_lower(losses: list[float]) -> bool:
    """The loss did not go down: the mean of the last tenth is not below the first tenth's."""
    n = max(3, len(losses) // 10)
    if len(losses) < 2 * n:
        return False
    head, tail = losses[:n], losses[-n:]
    return statistics.fmean(tail) >= 0.99 * statistics.fmean(head)


def at_prior(losses: list[float], prior: float) -> float | None:
    """The recent mean loss when it sits at `prior`, else None."""
    if prior <= 0 or len(losses) < PRIOR_WINDOW:
        return None
    recent = losses[-PRIOR_WINDOW:]
    if not all(math.isfinite(v) for v in recent):
        return None
    mean = statistics.fmean(recent)
    return mean if abs(mean - prior) <= PRIOR_TOL * prior else None


def label_entropy(counts: list[float]) -> float:
    """The cross-entropy of always predicting the label frequencies (nats)."""
    total = sum(counts)
    if total <= 0:
        return 0.0
    return -sum(c / total * math.log(c / total) for c in counts if c > 0)
