"""Deferred device flags: checks queue small tensors and read them together, once per step.

A check in a hot path must not call `.item()` per tensor (a host sync each). Instead it queues
a few 0-d numbers computed on the tensor's own device with a callback; `resolve()` stacks
everything queued on one device and reads it with a single `.tolist()`. The checker calls
`resolve()` at the step's end, so the cost is at most one sync per device per step, and only
on the steps where something was queued (the first few steps, by design).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

Callback = Callable[[list[float]], None]


class DeferredFlags:
    """A queue of (numbers on a device, callback) read in one go."""

    def __init__(self) -> None:
        self._queue: list[tuple[list[torch.Tensor], Callback]] = []

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, values: Sequence[torch.Tensor], callback: Callback) -> None:
        """Queue 0-d tensors (detached, any dtype); `callback(floats)` runs at `resolve()`."""
        vals = [v.detach().reshape(()).to(torch.float32) for v in values]
        self._queue.append((vals, callback))

    def clear(self) -> None:
        self._queue.clear()

    def resolve(self) -> None:
        """Read every queued number (one sync per device) and run the callbacks in order."""
        queue, self._queue = self._queue, []
        if not queue:
            return
        by_device: dict[Any, list[torch.Tensor]] = {}
        for vals, _ in queue:
            for v in vals:
                by_device.setdefault(v.device, []).append(v)
        read: dict[Any, list[float]] = {dev: torch.stack(ts).tolist() for dev, ts in by_device.items()}
        cursor = {dev: 0 for dev in read}
        for vals, callback in queue:
            out = []
            for v in vals:
                out.append(read[v.device][cursor[v.device]])
                cursor[v.device] += 1
            callback(out)
