"""Whether a recorded op may be run again by a check's replay (what-if recomputations of a loss
or a metric with one operand changed). One rule for every replay:

- an in-place op would write into the user's tensors;
- a collective (`torch.distributed`) run on one rank waits for the others, which never call it
  (a hang), or finds no process group once the user destroyed it.
"""

from __future__ import annotations

from typing import Any


def replayable(func: Any) -> bool:
    name = getattr(func, "__name__", "")
    if name.endswith("_") and not name.endswith("__") or name.startswith("__i") or name == "__setitem__":
        return False
    return not str(getattr(func, "__module__", "") or "").startswith("torch.distributed")
