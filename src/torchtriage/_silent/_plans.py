"""A `Plan` is one semantic check split in two: the numbers it needs (0-d tensors computed on
the data's device, no sync) and a judge that turns the read numbers into a finding's fields.

The session queues plans in `DeferredFlags` and reads them at the step's end; the public check
functions run the same plans at once. One code path, two costs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

from .._deferred import read_scalars
from .._findings import Finding, Report
from .._frames import UserFrame
from ._common import finding

Verdict = dict[str, Any]  # keyword arguments of `_common.finding` (name, severity, fields, evidence)


@dataclasses.dataclass
class Plan:
    values: list[torch.Tensor]
    judge: Callable[[list[float]], Verdict | None]

    def decide(self, vals: list[float]) -> Verdict | None:
        """The judge's verdict on finite numbers only: a NaN or Inf among them says nothing about
        the data's meaning (every comparison with NaN is false) and is the numerical check's to
        report."""
        if not all(math.isfinite(v) for v in vals):
            return None
        return self.judge(vals)


def verdict_to_finding(v: Verdict, *, frame: UserFrame | None, step: int | None = None,
                       module: str | None = None, op: str | None = None) -> Finding:
    v = dict(v)
    name = v.pop("name")
    v.pop("_node", None)  # the producer's node, for the checker to name its module
    frame = v.pop("_frame", None) or frame  # a verdict that names another line than the loss's
    v.setdefault("op", op)
    return finding(name, frame=frame, step=step, module=v.pop("module", module), **v)


def run_now(plans: list[Plan], *, frame: UserFrame | None, op: str | None = None) -> Report:
    """Resolve plans immediately (public check functions): one read for all of them."""
    read = read_scalars([v for p in plans for v in p.values])  # one read, whatever the devices
    out, i = [], 0
    for p in plans:
        n = len(p.values)
        v = p.decide(read[i:i + n])
        i += n
        if v is not None:
            out.append(verdict_to_finding(v, frame=frame, op=op))
    return Report(tuple(out))
