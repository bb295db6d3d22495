"""Which steps a sampling check takes part in (`Checker.wants_step`): one schedule for all.

A bug that shows on every step it occurs in (a wrong target, a loss graph kept, grads never
reset, a model trained in eval() mode) need not be looked for on every step of a long run. A
sampling check sees the first `FULL` steps in full (a bug present from the start is found where
it starts, as without sampling), then a pair of consecutive steps every `EVERY` steps (k, k + 1:
a check comparing a step with the one before it, like the zero_grad watch, still has both). A
bug that begins later is found at the first sampled step after it begins, at most `EVERY`
steps later, with that step's evidence.

The checks share the schedule, so the session's event lists (rebuilt when the set of checks
sitting out changes) are rebuilt twice per period, not once per check.
"""

from __future__ import annotations

FULL = 20  # the first steps, seen in full (the silent checks' loss-collapse window: 20 losses)
EVERY = 32


def sampled(step: int, full: int = FULL) -> bool:
    """True for a step a sampling check looks at: the first `full`, then k and k + 1 for every
    multiple k of `EVERY`."""
    return step < full or step % EVERY < 2
