"""The session's one follower of DataLoader passes: every check that asks which samples a batch
holds listens here (the data ledger, `_ledger/_follow.py`, built on it; the runtime leakage check's loader index).

`DataLoader.__init__` is wrapped to note where a loader was made; `_BaseDataLoaderIter.__init__`
and `_reset` (a pass begins: a new iterator, or a persistent-workers iterator reused),
`_next_index` (the sampler's indices, handed to the fetcher or to the workers ahead of their
batches: a first-in first-out queue per iterator) and `__next__` (a batch reaches the user's
loop, or the sampler is exhausted). Each event goes to the listeners in the order they joined;
a listener's own bug is reported (TriageInternalWarning) and never reaches the user's loop.

A listener implements any of: ``on_made(loader)``, ``on_begin(it, loader)``,
``on_batch(it, indices, data)`` (``indices``: what the sampler gave for this batch, None when
unknown: an iterable dataset, ``in_order=False``), ``on_stop(it)`` (StopIteration).

Cost: the patches are installed once per session, whichever checks listen; per batch one
deque append and pop and one call per listener.
"""

from __future__ import annotations

import collections
import weakref
from typing import Any

import numpy as np
import torch

_streams: weakref.WeakKeyDictionary[Any, Stream] = weakref.WeakKeyDictionary()


class Stream:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.listeners: list[tuple[str, Any]] = []
        self.queues: weakref.WeakKeyDictionary[Any, collections.deque[Any]] = weakref.WeakKeyDictionary()

    def listen(self, where: str, listener: Any) -> None:
        if not any(obj is listener for _, obj in self.listeners):
            self.listeners.append((where, listener))

    def emit(self, event: str, *args: Any) -> None:
        for where, obj in self.listeners:
            fn = getattr(obj, event, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception as e:  # our bug must never reach the user's loop
                self.session.internal_error(where, e)

    def install(self) -> None:
        from torch.utils.data import DataLoader, dataloader

        stream = self
        init = DataLoader.__dict__["__init__"]

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            init(loader, *args, **kwargs)
            stream.emit("on_made", loader)

        self._wrap(DataLoader, "__init__", init, __init__)
        cls = dataloader._BaseDataLoaderIter
        originals = {name: cls.__dict__[name] for name in ("__init__", "_reset", "_next_index", "__next__")}

        def __init__it(it: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
            originals["__init__"](it, loader, *args, **kwargs)
            stream.begin(it, loader)

        def _reset(it: Any, loader: Any = None, first_iter: bool = False, *args: Any, **kwargs: Any) -> Any:
            if not first_iter and loader is not None:  # a persistent-workers iterator's next pass
                stream.begin(it, loader)
            return originals["_reset"](it, loader, first_iter, *args, **kwargs)

        def _next_index(it: Any) -> Any:
            out = originals["_next_index"](it)
            q = stream.queues.get(it)
            if q is not None:
                q.append(out)
            return out

        def __next__(it: Any) -> Any:
            try:
                data = originals["__next__"](it)
            except StopIteration:
                stream.emit("on_stop", it)
                raise
            q = stream.queues.get(it)
            stream.emit("on_batch", it, q.popleft() if q else None, data)
            return data

        for name, fn in (("__init__", __init__it), ("_reset", _reset), ("_next_index", _next_index),
                         ("__next__", __next__)):
            self._wrap(cls, name, originals[name], fn)

    def begin(self, it: Any, loader: Any) -> None:
        try:
            self.queues[it] = collections.deque()
        except TypeError:  # (an iterator that is not weakly referenceable: indices unknown)
            pass
        self.emit("on_begin", it, loader)

    def _wrap(self, cls: type, name: str, original: Any, fn: Any) -> None:
        fn.__wrapped__ = original
        fn.__name__ = name
        fn.__qualname__ = f"{cls.__name__}.{name}"
        self.session.patch(cls, name, fn)


def stream(session: Any) -> Stream:
    """The session's stream of DataLoader events (installed at the first call)."""
    found = _streams.get(session)
    if found is None:
        found = _streams[session] = Stream(session)
        found.install()
    return found


def as_rows(indices: Any) -> np.ndarray | None:
    """A sampler's batch as int64 positions on the host: ints, numpy integers, a list, an array
    or a CPU tensor of them; None for anything else (an iterable dataset's None, keys of a
    dict-like dataset, negative numbers: not positions)."""
    if isinstance(indices, (int, np.integer)) and not isinstance(indices, bool):
        return np.asarray([int(indices)], dtype=np.int64) if int(indices) >= 0 else None
    if isinstance(indices, torch.Tensor):
        if indices.is_floating_point() or indices.is_complex() or indices.device.type != "cpu" \
                or indices.dtype == torch.bool:
            return None
        arr = indices.detach().reshape(-1).numpy().astype(np.int64, copy=False)
        return arr if not arr.size or arr.min() >= 0 else None
    if isinstance(indices, (list, tuple, np.ndarray)) and len(indices):
        try:
            arr = np.asarray(indices)
        except (ValueError, TypeError):
            return None
        if arr.dtype.kind in "iu" and arr.ndim == 1 and arr.min() >= 0:
            return arr.astype(np.int64, copy=False)
    return None


def tensors(obj: Any, depth: int = 0, most: int = 16) -> list[torch.Tensor]:
    """The tensors of a batch (nested lists, tuples and dicts, three levels, at most `most`)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if depth >= 3:
        return []
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        out: list[torch.Tensor] = []
        for v in obj[:most]:
            out += tensors(v, depth + 1, most)
        return out[:most]
    return []
