"""Reading a step's flags one step late (`watch(..., late_read=True)`).

The sentinel's one read per step sits in `optimizer.step()`'s pre-hook, so that `skip_step` can
still hide a non-finite update. On an accelerator that read is a blocking device→host copy: the
CPU waits there until every kernel queued so far (the whole forward and backward) has run, and
the device then idles while the CPU queues the optimizer step and the next forward. With
`late_read=True` (and without `skip_step`, which needs the answer before the update) the read
is only started there: the flags are copied `non_blocking` into pinned host memory behind a
CUDA event, and the values are taken at the next step's read point, when the event has long
completed. On the CPU (and other devices) the values are ready at once; the sentinel still
judges them one step late, the same code path (a test exercises it there).

What it costs: a finding comes one step later, after the step's update was applied, so the
step is not replayed (the finding names the step and the stage its flags tripped in, not the
op); the session then reads every later step at once and localizes as usual.
"""

from __future__ import annotations

from typing import Any

import torch

from .._catalogue import msg
from .._findings import Category, Finding, Severity, Stage


class PendingRead:
    """Flags on their way to the host: started now, `values()` at the next step."""

    def __init__(self, stacked: torch.Tensor, buffers: dict[Any, torch.Tensor]) -> None:
        self.event: Any = None
        if stacked.device.type == "cuda":
            key = (stacked.numel(), stacked.dtype)
            buf = buffers.get(key)
            if buf is None:  # one pinned buffer per size: the previous read was taken already
                buf = buffers[key] = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
            buf.copy_(stacked, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
            self.host = buf
        elif stacked.device.type == "cpu":
            self.host = stacked
        else:  # another accelerator: a plain copy (it waits as the immediate read would)
            self.host = stacked.cpu()

    def values(self) -> list[float]:
        if self.event is not None:
            self.event.synchronize()  # done long ago: the next step has been queued since
        return self.host.tolist()


def start(scalars: list[torch.Tensor], buffers: dict[Any, torch.Tensor]) -> PendingRead | None:
    """Start reading `scalars` (0-dim flags); None when they span devices (read them at once)."""
    try:
        stacked = torch.stack(scalars)
    except RuntimeError:
        return None
    return PendingRead(stacked, buffers)


_STAGES = {"data": Stage.DATA, "forward": Stage.FORWARD, "loss": Stage.LOSS, "backward": Stage.BACKWARD}


def finding(trip: str, step: int, evidence: dict[str, Any]) -> Finding:
    """A trip seen one step late: the step and its stage, not replayed."""
    return Finding(Category.NUMERICAL, "numerical.nonfinite_read_late",
                   msg("late.found", stage=msg(f"late.stage.{trip}"), step=step),
                   severity=Severity.ERROR, stage=_STAGES[trip], step=step,
                   cause=msg("late.cause"), next_check=msg("late.next"), evidence=evidence)
