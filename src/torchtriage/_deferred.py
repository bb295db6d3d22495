"""Device numbers read by the host at most once per step, whichever checks asked for them.

A check in a hot path must not call `.item()` per tensor: on CUDA each read waits for every
kernel queued so far (a device→host sync). Checks instead queue small tensors computed on the
tensor's own device (`DeferredFlags.add`, with a callback) and the numbers are read together:

  * `read_scalars(tensors)` is the one read: the accelerator's numbers are gathered on one
    device (device-to-device copies, no host wait) and read with one `.tolist()`; numbers
    already on the CPU are read without touching the accelerator. Never more than one sync.
  * A `DeferredFlags` that `ride(session, flags)` joined is read along with the non-finite
    sentinel's own read of the step (`optimizer.step()`'s pre-hook): the sentinel fills the
    queued numbers (`pending()` / `fill()`), and the owner's `resolve()` at its step end then
    runs the callbacks without reading anything. Numbers queued after that read, or in a
    session without the sentinel, are read by `resolve()` itself, once.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

Callback = Callable[[list[float]], None]


def read_scalars(tensors: Sequence[torch.Tensor]) -> list[float]:
    """The elements of `tensors` (0-dim or 1-dim, any device and dtype) as Python floats, in
    order, with at most one device→host synchronisation."""
    if not tensors:
        return []
    accel = next((t.device for t in tensors if t.device.type != "cpu"), None)
    if accel is None or all(t.device == accel for t in tensors):
        with torch.no_grad():  # (outside autograd: no .detach() per tensor, one op fewer each)
            joined, order = _gather_one_device(tensors)
        values = joined.tolist()  # the one read
        return values if order is None else _in_order(values, tensors, order)
    with torch.no_grad():
        flat = [t.reshape(-1) for t in tensors]
    # Mixed devices (model parallel, a CPU batch with CUDA outputs). Moving an accelerator's
    # number to the CPU one at a time would sync each time, and a blocking CPU→CUDA copy syncs
    # the stream too: the CPU's numbers are read where they are, the accelerators' numbers are
    # gathered on one of them (peer copies are ordered on the device, the host does not wait).
    dtype = torch.float32 if accel.type == "mps" else torch.float64
    on_accel = [i for i, t in enumerate(flat) if t.device.type != "cpu"]
    on_cpu = [i for i, t in enumerate(flat) if t.device.type == "cpu"]
    out: list[list[float]] = [[] for _ in flat]
    if on_accel:
        gathered = torch.cat([flat[i].to(accel, dtype) for i in on_accel]).tolist()
        _split(gathered, [flat[i] for i in on_accel], on_accel, out)
    if on_cpu:
        values = torch.cat([flat[i].to(torch.float64) for i in on_cpu]).tolist()
        _split(values, [flat[i] for i in on_cpu], on_cpu, out)
    return [v for part in out for v in part]


def read_host_scalars(tensors: Sequence[torch.Tensor]) -> list[float]:
    """The elements of CPU tensors as Python floats, in order: no device is read (numbers an
    optimizer keeps on the host, like its `step` counters, whatever device its parameters are on)."""
    if not tensors:
        return []
    if any(t.device.type != "cpu" for t in tensors):
        raise ValueError("read_host_scalars reads CPU tensors only")
    with torch.no_grad():
        return torch.cat([t.reshape(-1).double() for t in tensors]).tolist()


def _gather_one_device(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[int] | None]:
    """The numbers of `tensors` (one device) in one 1-d tensor of the read's dtype, a few ops per
    dtype rather than per tensor (a session's first steps queue several hundred numbers, and a
    reshape and a conversion each took ~5 us); with the order of the tensors in it (None: as
    given). Each element is converted as before: exact for every integer, bool and float."""
    dtype = torch.float32 if tensors[0].device.type == "mps" else torch.float64
    groups: dict[tuple[torch.dtype, bool], list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.dtype, t.dim() == 0), []).append(i)
    parts, order = [], []
    for (_, scalar), idx in groups.items():
        ts = [tensors[i] for i in idx]
        if scalar:
            parts.append(torch.stack(ts) if len(ts) > 1 else ts[0].reshape(1))
        else:
            parts.append(torch.cat([t.reshape(-1) for t in ts]))
        order += idx
    if len(parts) == 1:
        return parts[0].to(dtype), None  # (one group: already in order)
    return torch.cat([p.to(dtype) for p in parts]), order


def _in_order(values: list[float], tensors: Sequence[torch.Tensor], order: list[int]) -> list[float]:
    out: list[list[float]] = [[] for _ in tensors]
    at = 0
    for i in order:
        n = tensors[i].numel()
        out[i] = values[at:at + n]
        at += n
    return [v for part in out for v in part]


def _split(values: list[float], parts: list[torch.Tensor], where: list[int], out: list[list[float]]) -> None:
    at = 0
    for i, t in zip(where, parts):
        n = t.numel()
        out[i] = values[at:at + n]
        at += n


class DeferredFlags:
    """A queue of (numbers on a device, callback) read in one go.

    Example:
        >>> flags = DeferredFlags()
        >>> flags.add([x.amax()], lambda vals: print(vals[0]))
        >>> flags.resolve()  # one read for everything queued; prints the max
    """

    def __init__(self) -> None:
        # [tensors, callback, values read (None until read)]
        self._queue: list[list[Any]] = []

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, values: Sequence[torch.Tensor], callback: Callback) -> None:
        """Queue 0-d or 1-d tensors (any dtype); `callback(floats)` runs at `resolve()` with all
        their elements, in order."""
        # (a 0-d or 1-d number that needs no grad is kept as it is: no op per value)
        vals = [v if v.dim() <= 1 and not v.requires_grad else
                v.detach().reshape(()) if v.dim() == 0 else v.detach().reshape(-1) for v in values]
        self._queue.append([vals, callback, None])

    def clear(self) -> None:
        self._queue.clear()

    def pending(self) -> list[torch.Tensor]:
        """The queued tensors not read yet, in order (for a reader that reads them along)."""
        return [v for vals, _, read in self._queue if read is None for v in vals]

    def fill(self, values: list[float]) -> None:
        """Hand in the elements of `pending()`, in the same order, read by someone else."""
        at = 0
        for entry in self._queue:
            if entry[2] is None:
                n = sum(v.numel() for v in entry[0])
                entry[2] = values[at:at + n]
                at += n

    def resolve_read(self) -> None:
        """Run the callbacks whose numbers were already read (`fill`), in order; keep the unread
        ones queued. Never reads (a queue that rides the next step's read resolves this way)."""
        done = [e for e in self._queue if e[2] is not None]
        if done:
            self._queue = [e for e in self._queue if e[2] is None]
            for _, callback, read in done:
                callback(read)

    def resolve(self) -> None:
        """Read whatever no one read yet (one sync at most) and run the callbacks in order."""
        queue, self._queue = self._queue, []
        if not queue:
            return
        unread = [v for vals, _, read in queue if read is None for v in vals]
        if unread:
            values, at = read_scalars(unread), 0
            for entry in queue:
                if entry[2] is None:
                    n = sum(v.numel() for v in entry[0])
                    entry[2] = values[at:at + n]
                    at += n
        for _, callback, read in queue:
            callback(read)


_riders: weakref.WeakKeyDictionary[Any, list[DeferredFlags]] = weakref.WeakKeyDictionary()


def ride(session: Any, flags: DeferredFlags) -> None:
    """Let the session's per-step read (the non-finite sentinel's) read `flags` too."""
    lst = _riders.setdefault(session, [])
    if not any(f is flags for f in lst):
        lst.append(flags)


def leave(session: Any, flags: DeferredFlags) -> None:
    lst = _riders.get(session)
    if lst is not None:
        lst[:] = [f for f in lst if f is not flags]


def riders(session: Any) -> list[DeferredFlags]:
    """The queues joined to `session` that hold unread numbers."""
    return [f for f in _riders.get(session, ()) if any(e[2] is None for e in f._queue)]
