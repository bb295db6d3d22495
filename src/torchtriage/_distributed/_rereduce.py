"""A value reduced across the ranks once (issue 15, session 11): `all_reduce(t, SUM)` of a tensor
that already holds the sum over the ranks, with nothing written to it since, multiplies that sum
by the world size (a metric reduced in three copied lines, a loop that reduces one tensor per
name where two names are one tensor).

Measured: at each synchronous `dist.all_reduce` with `ReduceOp.SUM`, the tensor (by weak
reference) and its version counter after the call are kept; a later SUM reduction of the same
tensor at the same version is a re-reduction. For a one-element tensor its value before and after
is read (one host read, only then: collectives are not per-step hot paths). The harm is the
factor: `world_size` per extra reduction. AVG / MAX / MIN reduced again change nothing and are not
judged; nor is an asynchronous reduction (`async_op=True`: its value is not ready at return).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from .._findings import Category, Finding, Severity, from_catalogue
from .._frames import UserFrame

MAX_KEPT = 256  # tensors kept (by weak reference) until their next reduction


@dataclasses.dataclass(eq=False)
class _Chain:
    frames: list[UserFrame | None]
    shape: tuple[int, ...]
    first_value: float | None = None  # the value after the first reduction (one-element tensors)
    last_value: float | None = None


class Rereduce:
    def __init__(self) -> None:
        self.kept: dict[int, tuple[weakref.ref[Any], int, _Chain]] = {}
        self.chains: dict[tuple[Any, ...], _Chain] = {}
        self.world = 0

    def call(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], frame: UserFrame | None) -> Any:
        """Run `dist.all_reduce(*args, **kwargs)`, noting a SUM reduction of an unchanged sum."""
        import torch
        import torch.distributed as dist

        got = args[0] if args else kwargs.get("tensor")
        op = args[1] if len(args) > 1 else kwargs.get("op", dist.ReduceOp.SUM)
        if not isinstance(got, torch.Tensor) or kwargs.get("async_op") or (len(args) > 3 and args[3]) \
                or op != dist.ReduceOp.SUM:
            return fn(*args, **kwargs)
        t: torch.Tensor = got
        seen = self.kept.get(id(t))
        chain = None
        if seen is not None and seen[0]() is t and seen[1] == t._version:
            chain = seen[2]
        out = fn(*args, **kwargs)
        try:
            if chain is None:
                chain = _Chain([frame], tuple(t.shape))
                if t.numel() == 1:
                    chain.first_value = float(t.detach().reshape(()).item())
            else:
                chain.frames.append(frame)
                if t.numel() == 1:
                    chain.last_value = float(t.detach().reshape(()).item())
                key = tuple((f.file, f.line) if f else None for f in chain.frames[:2])
                self.chains.setdefault(key, chain)
            if len(self.kept) >= MAX_KEPT:
                self.kept = {k: v for k, v in self.kept.items() if v[0]() is not None}
            if len(self.kept) < MAX_KEPT:
                self.kept[id(t)] = (weakref.ref(t), t._version, chain)
        except (RuntimeError, TypeError):
            pass
        return out

    def findings(self, world: int) -> list[Finding]:
        out = []
        for chain in self.chains.values():
            n = len(chain.frames)
            factor = world ** (n - 1)
            lines = [f"{f.file.rsplit('/', 1)[-1]}:{f.line}" if f else "?" for f in chain.frames[:8]]
            evidence: dict[str, Any] = {"reductions": n, "world_size": world, "factor": factor,
                                        "shape": list(chain.shape), "lines": lines}
            if chain.first_value is not None and chain.last_value is not None:
                evidence.update(value_after_first_reduction=chain.first_value, value_reported=chain.last_value)
            frame = chain.frames[1]
            out.append(from_catalogue(
                Category.DISTRIBUTED, "distributed.reduced_twice", "dist.reduced_twice",
                fields={"n": n, "lines": ", ".join(lines), "factor": factor, "world": world},
                cause_key="dist.cause.reduced_twice", next_key="dist.next.reduced_twice", frame=frame,
                evidence=evidence, source_line=True, severity=Severity.WARNING))
        return out
