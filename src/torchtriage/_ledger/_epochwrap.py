"""Samplers inside samplers: whether `set_epoch` reaches the one that orders the epoch (issue 25).

A sampler that reshuffles per epoch (`seed + epoch`) is often wrapped: a distributed wrapper that
shards another sampler's order (Lightning's `DistributedSamplerWrapper`, catalyst's, a
`BatchSampler` of your own). The loop calls `set_epoch` on the sampler it sees, the outer one; a
wrapper that does not forward it leaves the inner sampler at its first epoch, and every epoch
replays one order. What is read: at each pass's start, the outer sampler's `epoch` and the
`epoch` of every sampler it holds (through its attributes, `Sampler` and `Dataset` objects, at
most `DEPTH` levels down) that has a `set_epoch` method and does not say `shuffle=False`. The
verdict (`_verdicts.order`) needs the measured harm: complete training epochs in the same order
while the outer epoch changed and an inner one did not.
"""

from __future__ import annotations

import ast
import inspect
from typing import Any

from .._frames import UserFrame, is_user_file, user_frame_of_line
from .._source import parsed

DEPTH = 3


def inner_epochs(sampler: Any) -> tuple[tuple[str, int], ...]:
    """(class name, epoch) of each sampler below `sampler` whose order follows `set_epoch`."""
    from torch.utils.data import Dataset, Sampler

    out: list[tuple[str, int]] = []
    seen = {id(sampler)}
    level = [sampler]
    for _ in range(DEPTH):
        nxt = []
        for obj in level:
            try:
                values = list(vars(obj).values())
            except TypeError:
                continue
            for v in values:
                if id(v) in seen or not isinstance(v, (Sampler, Dataset)):
                    continue
                seen.add(id(v))
                nxt.append(v)
                epoch = getattr(v, "epoch", None) if isinstance(v, Sampler) else None
                if isinstance(epoch, int) and callable(getattr(v, "set_epoch", None)) \
                        and getattr(v, "shuffle", True) is not False:
                    out.append((type(v).__name__, epoch))
        level = nxt
    return tuple(out)


def outer_epoch(sampler: Any) -> int | None:
    """The epoch the loader's own sampler was given (`set_epoch`), when it keeps one."""
    epoch = getattr(sampler, "epoch", None)
    return epoch if isinstance(epoch, int) and callable(getattr(sampler, "set_epoch", None)) else None


def class_line(cls: type) -> UserFrame | None:
    """Where a sampler class of the user's own code is defined (the wrapper to fix): the `class`
    statement around its methods (read from the methods' code, not the module: a script run as
    `__main__` by another program is not `sys.modules["__main__"]`)."""
    codes = [f.__code__ for f in vars(cls).values() if inspect.isfunction(f)]
    if not codes:
        return None
    file = codes[0].co_filename
    first = min(c.co_firstlineno for c in codes if c.co_filename == file)
    if not is_user_file(file):
        return None
    tree = parsed(file)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__ \
                and node.lineno <= first <= (node.end_lineno or node.lineno):
            return user_frame_of_line(file, node.lineno, cls.__name__)
    return None
