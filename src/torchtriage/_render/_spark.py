"""A one-line sparkline of a per-step series for the terminal report (issue 19).

`sparkline(values)` draws up to `WIDTH` block characters, one per bucket of steps (the bucket's
mean), on a log scale when the positive values span two decades or more. A bucket holding a
NaN or ±Inf is drawn as `×`, a bucket with no value as a space.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .._catalogue import msg
from ._svg import _value, fmt

BLOCKS = "▁▂▃▄▅▆▇█"
WIDTH = 40


def sparkline(values: Sequence[Any], width: int = WIDTH) -> str:
    """The block characters for `values` (numbers, None, NaN/±Inf or their JSON strings)."""
    vals = [_value(v) for v in values]
    n = len(vals)
    if n == 0:
        return ""
    k = min(width, n)
    buckets: list[float | None] = []
    for b in range(k):
        part = vals[b * n // k:(b + 1) * n // k] or vals[b * n // k:b * n // k + 1]
        if any(v is not None and not math.isfinite(v) for v in part):
            buckets.append(math.nan)
            continue
        fin = [v for v in part if v is not None]
        buckets.append(sum(fin) / len(fin) if fin else None)
    ys = [v for v in buckets if v is not None and math.isfinite(v)]
    if not ys:
        return "".join("×" if v is not None else " " for v in buckets)
    log = min(ys) > 0 and max(ys) / min(ys) >= 100
    tr = (lambda v: math.log10(v)) if log else (lambda v: v)
    lo, hi = tr(min(ys)), tr(max(ys))
    out = []
    for v in buckets:
        if v is None:
            out.append(" ")
        elif not math.isfinite(v):
            out.append("×")
        else:
            i = 0 if hi == lo else int((tr(v) - lo) / (hi - lo) * (len(BLOCKS) - 1) + 0.5)
            out.append(BLOCKS[i])
    return "".join(out)


def trend_line(series: Mapping[str, Any], meta: Mapping[str, Any]) -> str | None:
    """`loss ▇▅▃▂▁ 2.31 → 0.12, steps 0–63`: the loss (else the first series), or None."""
    if not isinstance(series, Mapping) or not series:
        return None
    name = "loss" if "loss" in series else next(iter(series))
    values = series.get(name)
    if not isinstance(values, (list, tuple)) or len(values) < 2:
        return None
    steps = meta.get("series_steps", {}).get(name) if isinstance(meta.get("series_steps"), Mapping) else None
    start, end = (steps[0], steps[-1]) if steps and len(steps) == len(values) else (0, len(values) - 1)
    vals = [_value(v) for v in values]
    return msg("report.sparkline", name=name, spark=sparkline(values), first=fmt(vals[0]), last=fmt(vals[-1]),
               start=start, end=end)
