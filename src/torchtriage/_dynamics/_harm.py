"""Severity from harm for the dynamics warnings (issue 24): a trend finding is a warning only
when this run shows what it cost.

A dynamics warning names the step where the trouble began (a gradient spike, an lr that
collapsed, a warm-up, the loss reaching the label prior). It is held until the session ends;
then the loss after that step is compared with the loss at it:

  * the loss kept falling (the median of the run's last 10 losses is below the median of the
    10 from the finding's step on by more than 2 % and by more than twice the two windows'
    spread, so that batches of different difficulty are no progress): the run learned through
    it, so the finding is an `info`, with both numbers as evidence. A finding about the whole
    run (a warm-up that never ended) is measured from the run's first losses;
  * otherwise (flat, higher, non-finite, or no loss seen after it): a `warning`, with the same
    evidence, which is the harm a user can check.

The loss at the label prior is measured from the prior itself: the run learned when its last
losses are clearly below it, even when the run ended a few steps after the finding. When the
training going on at the finding's step ended before the run did (a teacher trained, then a
student: `_phases`), "the loss at the end" is that training's last losses, not a later model's.

A gradient spike or growth is judged by whether the loss got worse after it (rose by more than
the same margin, or stopped being finite), since many correct runs have losses that do not fall
(RL critics, GANs). With losses before it, a spike is a warning only when, besides, it threw the
loss up at once (the 10 losses from its step above the 10 before it) and the run's last 10 losses
are still above that level; a loss that drifts up long after a spike (an RL critic whose bootstrapped
targets grow) is no cost of that spike.

The loss growing geometrically (`dynamics.divergence`) is judged by where the loss went after the
growth: a warning when a loss after it was non-finite, or when the run's last losses are neither
back at the level before the growth nor clearly below the level the growth settled at (the 10
losses from its last step on). A divergence whose weights are thrown away (an lr range test that
reloads the saved state_dict: the loss returns to where it was) or a rise from an initial transient
to a plateau the run then learns from (a contrastive loss that starts near 0 against a random
queue) cost the final result nothing: `info`, with the numbers. Both need 20 losses after the growth.
When the loss that grew stops there (the range test's loop ends) and training goes on under another
loss (another backward site: its own series), that training falling clearly is the run learning.
(Session 15) A growth the loss does not keep is no divergence: when the 3 losses after its peak
are back below the geometric middle of the level before it and the peak (a heavy-tailed series:
an RL critic whose batch drew the transitions with the largest TD errors, 0.027 -> 16.6 in 5
steps, then 0.088), it was one outlier batch reached by a run of small rises, an `info` with
those losses as evidence (`transient`), unless a loss after it was non-finite.

Findings whose harm is their own definition (updates too small to move the loss) are not held,
nor are findings whose evidence
carries a measured `harm` (the lr schedule the run followed against the declared one: a cosine
that climbed back up, scheduler changes that never reached the optimizer, a schedule that
restarted on resume).
"""

from __future__ import annotations

import collections
import math
import statistics
from typing import Callable

from .._findings import Finding, Severity
from ._common import num

# Findings whose evidence already is the loss failing to fall.
_INHERENT = {"dynamics.stagnation", "dynamics.scheduler_never_stepped"}
# Findings about the loss growing: judged by the level after the growth (evidence key of its last step).
_GROWTH = {"dynamics.divergence": "step_now"}
# Findings whose harm is the loss getting worse after them, not the loss failing to fall: a
# gradient spike in a run whose loss is flat by nature (RL critics, GANs) harmed nothing unless
# the loss rose or broke after it.
_WORSE_ONLY = {"dynamics.exploding_gradients"}
# Findings that name the level the loss is stuck at (evidence key): measured from that level.
_LEVEL = {"dynamics.loss_at_prior": "prior"}
# Findings about the whole run, made at its end: measured from the run's first losses.
_WHOLE_RUN = {"dynamics.warmup_never_ends"}
LAST = 10  # losses that make "the loss at the end"
HEAD = 10  # first losses kept, for findings about the whole run


class HarmGate:
    """Holds dynamics warnings until the run's end, then judges each by the loss after it."""

    def __init__(self, end_of: Callable[[int | None], int | None] | None = None,
                 later: Callable[[int], tuple[str, list[float]] | None] | None = None) -> None:
        self.head: list[tuple[int, float]] = []
        self.recent: collections.deque[tuple[int, float]] = collections.deque(maxlen=4096)
        # step -> the last step of the training going on then, when it ended before the run
        # did (`_phases`): a later model's losses are no measure of an earlier one's trouble
        self.end_of = end_of or (lambda step: None)
        # step -> (name, finite values) of the other loss series (another backward site) with the most
        # losses after `step`: the training that went on when the watched loss stopped
        self.later = later or (lambda step: None)
        self.held: list[tuple[Finding, list[float]]] = []
        self.before: dict[int, list[float]] = {}  # a held finding's losses just before its step
        self.last_broken: int | None = None  # the last step whose loss was non-finite

    def loss(self, step: int, value: float) -> None:
        """One finite loss of the run (already read by the step's read)."""
        if len(self.head) < HEAD:
            self.head.append((step, value))
        self.recent.append((step, value))
        for _, window in self.held:
            if len(window) < LAST:  # the losses from a held finding's step on
                window.append(value)

    def broke(self, step: int) -> None:
        """A non-finite loss at `step`."""
        self.last_broken = step if self.last_broken is None else max(step, self.last_broken)

    def holds(self, f: Finding) -> bool:
        return (f.severity is Severity.WARNING and f.code.startswith("dynamics.") and f.code not in _INHERENT
                and "harm" not in f.evidence)  # a finding whose evidence measures its harm is not held

    @staticmethod
    def revised(f: Finding) -> bool:
        """Added at once and revised at the end (its place in the order kept: the loss growing is
        where a run that breaks went wrong, before its NaN), rather than held."""
        return f.code in _GROWTH

    def hold(self, f: Finding) -> None:
        """Hold `f`; the losses from its step on are taken now, while they are still kept."""
        start = 0 if f.step is None or f.code in _WHOLE_RUN else f.step
        points = self._points()
        settled = _int(f.evidence.get(_GROWTH.get(f.code, ""), None))
        self.held.append((f, [v for s, v in points if s >= (start if settled is None else settled)][:LAST]))
        self.before[id(f)] = [v for s, v in points if s < start][-LAST:]

    def release(self) -> list[Finding]:
        """The held findings, each with its verdict and the loss numbers behind it."""
        out, held = [], self.held
        self.held = []
        points = self._points()
        before_of, self.before = self.before, {}
        run_after = _level([v for _, v in points[-LAST:]])
        for f, window in held:
            end = self.end_of(f.step) if f.code not in _WHOLE_RUN else None
            phase = [v for s, v in points if s <= end] if end is not None else []
            after, after_spread = _level(phase[-LAST:]) if phase else run_after
            before, before_spread = _level(window)
            level = _float(f.evidence.get(_LEVEL.get(f.code, ""), None))
            if level is not None:
                # the finding names the level the loss sits at (the label prior): the run learned
                # when its last losses are clearly below that level, however soon the run ended
                before, before_spread = level, 0.0
            margin = max(0.02 * abs(before), before_spread + after_spread) if before is not None else 0.0
            if f.code in _GROWTH:
                out.append(self._growth(f, window, before_of.get(id(f), []), phase or [v for _, v in points]))
                continue
            if f.code in _WORSE_ONLY:
                learned = (before is not None and after is not None and math.isfinite(after)
                           and after - before <= margin)
                prior, prior_spread = _level(before_of.get(id(f), []))
                evidence_before = None
                if prior is not None and before is not None and after is not None and math.isfinite(after):
                    # a spike harms at once and for good: the losses right after it above those right
                    # before it, and the run's last losses still above them. A loss that drifts up
                    # long after (an RL critic's targets growing) is no cost of the spike.
                    jump = before - prior > max(0.02 * abs(prior), prior_spread + before_spread)
                    kept = after - prior > max(0.02 * abs(prior), prior_spread + after_spread)
                    learned = learned or not (jump and kept)  # both: worse after it, and thrown up at it
                    evidence_before = num(prior)
            else:
                learned = (before is not None and after is not None and math.isfinite(after)
                           and before - after > margin)
            evidence = dict(f.evidence)
            if f.code in _WORSE_ONLY and evidence_before is not None:
                evidence["loss_before_finding"] = evidence_before
            evidence["loss_at_finding"] = num(before)
            evidence["loss_at_end"] = num(after)
            evidence["run_kept_learning"] = learned
            if phase:
                evidence["training_ended_at_step"] = end  # a later model trained after it
            out.append(f.replace(severity=Severity.INFO if learned else Severity.WARNING, evidence=evidence))
        return out

    def _growth(self, f: Finding, settled_window: list[float], before_window: list[float],
                losses: list[float]) -> Finding:
        """A geometric growth of the loss: harmless when the run's last losses are back at the level
        before it, or clearly below the level it settled at; never when a later loss was non-finite."""
        last = _int(f.evidence.get(_GROWTH[f.code]))
        points = self._points()
        after_growth = sum(1 for s, _ in points if last is not None and s > last)
        broke = self.last_broken is not None and self.last_broken >= (f.step or 0)
        after, after_spread = _level(losses[-LAST:])
        before, before_spread = _level(before_window)
        settled, settled_spread = _level(settled_window)
        learned = False
        transient = _transient(settled_window, before)
        if not broke and after is not None and math.isfinite(after) and after_growth >= LAST + len(settled_window):
            back = before is not None and after - before <= max(0.02 * abs(before), before_spread + after_spread)
            fell = settled is not None and settled - after > max(0.02 * abs(settled), settled_spread + after_spread)
            learned = back or fell
        evidence = dict(f.evidence)
        if not learned and not broke and last is not None and after_growth < LAST:
            # the loop that diverged stopped (an lr range test ends at the divergence): the training
            # that went on afterwards, under another loss, is what the run ended with
            other = self.later(last)
            if other is not None and not all(math.isfinite(v) for v in other[1]):
                broke = True  # the training after it broke
            elif other is not None and len(other[1]) >= 2 * LAST:
                first, first_spread = _level(other[1][:LAST])
                end, end_spread = _level(other[1][-LAST:])
                assert first is not None and end is not None
                learned = first - end > max(0.02 * abs(first), first_spread + end_spread)
                evidence["later_loss"] = other[0]
                evidence["later_loss_first"] = num(first)
                evidence["later_loss_at_end"] = num(end)
        evidence["loss_before_growth"] = num(before)
        evidence["loss_after_growth"] = num(settled)
        evidence["loss_at_end"] = num(after)
        evidence["nonfinite_after"] = broke
        evidence["run_kept_learning"] = learned
        if transient is not None and not broke:
            evidence["transient"] = True
            evidence["losses_after_peak"] = [num(v) for v in transient]
        return f.replace(severity=Severity.INFO if learned or (transient is not None and not broke)
                         else Severity.WARNING, evidence=evidence)

    def _points(self) -> list[tuple[int, float]]:
        head_end = self.head[-1][0] if self.head else -1
        return self.head + [p for p in self.recent if p[0] > head_end]


AFTER_PEAK = 3  # losses after a growth's peak that tell whether the loss kept it


def _transient(settled_window: list[float], before: float | None) -> list[float] | None:
    """The losses after a growth's peak when they fell back below the geometric middle of the level
    before the growth and the peak (the growth was not kept), else None."""
    if before is None or len(settled_window) < 1 + AFTER_PEAK:
        return None
    peak, after = settled_window[0], settled_window[1:1 + AFTER_PEAK]
    if not (before > 0 and peak > before and all(math.isfinite(v) for v in after)):
        return None
    return after if statistics.median(after) <= math.sqrt(before * peak) else None


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _float(v: object) -> float | None:
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _level(values: list[float]) -> tuple[float | None, float]:
    """(median, median absolute deviation) of a window of losses."""
    if not values:
        return None, 0.0
    mid = statistics.median(values)
    return mid, statistics.median(abs(v - mid) for v in values)
