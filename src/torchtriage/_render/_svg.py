"""Inline SVG line charts for the HTML report, drawn by hand (no plotting library, no JS).

A series is one value per step: a number, None (not measured), or a non-finite value
(a float NaN/±Inf, or the strings "nan" / "inf" / "-inf" that the JSON report stores).
Non-finite points are drawn as red crosses on the top (NaN, +Inf) or bottom (-Inf) edge,
so the step where a loss went NaN is visible even though it has no place on the axis.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from html import escape
from typing import Any

from .._catalogue import msg

WIDTH, HEIGHT = 500, 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 62, 14, 16, 38
MAX_POINTS = 1200  # longer series are drawn as min/max buckets to keep the page small
MAX_MARKS = 60  # non-finite crosses drawn; all are counted in the caption


def _value(v: Any) -> float | None:
    """A float (possibly non-finite) or None for a missing value."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, str):
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.get(v.strip().lower())
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def fmt(v: float | None) -> str:
    if v is None:
        return "–"
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return f"{v:.4g}"


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = hi - lo
    raw = span / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(0.0 if abs(t) < step * 1e-9 else t)
        t += step
    return ticks


def _buckets(points: list[tuple[int, float]], n_steps: int) -> list[tuple[int, float]]:
    """Min and max of each bucket, in step order, so that spikes survive downsampling."""
    size = math.ceil(n_steps / (MAX_POINTS // 2))
    out: list[tuple[int, float]] = []
    bucket: list[tuple[int, float]] = []
    for p in points:
        if bucket and p[0] // size != bucket[0][0] // size:
            out.extend(_extremes(bucket))
            bucket = []
        bucket.append(p)
    if bucket:
        out.extend(_extremes(bucket))
    return out


def _extremes(bucket: list[tuple[int, float]]) -> list[tuple[int, float]]:
    lo = min(bucket, key=lambda p: p[1])
    hi = max(bucket, key=lambda p: p[1])
    return [lo] if lo is hi else sorted({lo, hi})


@dataclasses.dataclass(frozen=True)
class _Axes:
    """Where a step and a value land in the plot area."""

    log: bool
    lo: float  # value range, after the log transform when `log`
    hi: float
    x_hi: int  # the last step on the x axis
    steps: Sequence[int] | None  # the step of each value (None: 0, 1, 2, ...)
    pw: float = WIDTH - _LEFT - _RIGHT
    ph: float = HEIGHT - _TOP - _BOTTOM

    def tf(self, v: float) -> float:
        return math.log10(v) if self.log else v

    def x(self, i: float) -> float:
        return _LEFT + self.pw * i / self.x_hi

    def at(self, i: int) -> int:  # the step of the i-th value
        return self.steps[i] if self.steps else i

    def y(self, v: float) -> float:
        return _TOP + self.ph * (1 - (self.tf(v) - self.lo) / (self.hi - self.lo))


def _axes(ys: list[float], log: bool | None, n: int, steps: Sequence[int] | None) -> _Axes:
    """The scale: a log y axis when asked (or, for None, when positive values span two decades),
    the finite values' range padded by 5%, the x axis up to the last step."""
    if log is None:
        log = bool(ys) and min(ys) > 0 and max(ys) / min(ys) >= 100
    elif log and ys and min(ys) <= 0:
        log = False  # a log axis cannot show zero or negative values
    tf = (lambda v: math.log10(v)) if log else (lambda v: v)
    lo, hi = (min(map(tf, ys)), max(map(tf, ys))) if ys else (0.0, 1.0)
    if hi - lo < 1e-12:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    else:
        pad = (hi - lo) * 0.05
        lo, hi = lo - pad, hi + pad
    if steps is not None and len(steps) != n:
        steps = None
    return _Axes(log, lo, hi, max(steps[-1] if steps else n - 1, 1), steps)


def _grid(ax: _Axes) -> list[str]:
    """The plot area, the y grid with its labels, the x ticks (integer steps), the axis labels."""
    pw, ph = ax.pw, ax.ph
    parts = [f'<rect class="plot" x="{_LEFT}" y="{_TOP}" width="{pw}" height="{ph}"/>']
    if ax.log:
        y_ticks = [10.0 ** e for e in range(math.ceil(ax.lo - 1e-9), math.floor(ax.hi + 1e-9) + 1)]
        if len(y_ticks) > 8:
            y_ticks = y_ticks[:: math.ceil(len(y_ticks) / 8)]
    else:
        y_ticks = _nice_ticks(ax.lo, ax.hi)
    for t in y_ticks:
        ty = ax.y(t)
        label = f"1e{round(math.log10(t))}" if ax.log else f"{t:.4g}"
        parts.append(f'<line class="grid" x1="{_LEFT}" x2="{_LEFT + pw}" y1="{ty:.1f}" y2="{ty:.1f}"/>'
                     f'<text class="tick" x="{_LEFT - 6}" y="{ty + 4:.1f}" text-anchor="end">{label}</text>')
    for t in _nice_ticks(0, ax.x_hi, 6):
        if t != int(t) or t > ax.x_hi:
            continue
        tx = ax.x(t)
        parts.append(f'<line class="axis" x1="{tx:.1f}" x2="{tx:.1f}" y1="{_TOP + ph}" y2="{_TOP + ph + 4}"/>'
                     f'<text class="tick" x="{tx:.1f}" y="{_TOP + ph + 16}" text-anchor="middle">{int(t)}</text>')
    parts.append(f'<text class="axis-label" x="{_LEFT + pw / 2:.1f}" y="{HEIGHT - 4}" text-anchor="middle">'
                 f'{escape(msg("html.chart_step"))}</text>')
    if ax.log:
        parts.append(f'<text class="axis-label" x="{_LEFT + 4}" y="{_TOP + 12}">{escape(msg("html.chart_log"))}</text>')
    return parts


def _line(ax: _Axes, vals: list[float | None], drawn: list[tuple[int, float]]) -> list[str]:
    """The line through the drawn points, broken at missing and non-finite values (a lone
    point is a dot)."""
    runs: list[list[tuple[int, float]]] = []
    prev = None
    for i, v in drawn:
        contiguous = prev is not None and all(
            vals[j] is not None and math.isfinite(vals[j]) for j in range(prev + 1, i))  # type: ignore[arg-type]
        if not runs or not contiguous:
            runs.append([])
        runs[-1].append((i, v))
        prev = i
    parts = []
    for run in runs:
        if len(run) == 1:
            i, v = run[0]
            parts.append(f'<circle class="dot" cx="{ax.x(ax.at(i)):.1f}" cy="{ax.y(v):.1f}" r="2.5"/>')
        else:
            pts = " ".join(f"{ax.x(ax.at(i)):.1f},{ax.y(v):.1f}" for i, v in run)
            parts.append(f'<polyline class="line" points="{pts}"/>')
    return parts


def _marks(ax: _Axes, mark_step: int | None, bad: list[tuple[int, float]]) -> list[str]:
    """The primary finding's step (a dashed line) and the non-finite values (red crosses on the
    top edge for NaN / +Inf, the bottom one for -Inf)."""
    parts = []
    pw, ph = ax.pw, ax.ph
    if mark_step is not None and 0 <= mark_step <= ax.x_hi:
        mx = ax.x(mark_step)
        parts.append(f'<line class="mark" x1="{mx:.1f}" x2="{mx:.1f}" y1="{_TOP}" y2="{_TOP + ph}"/>'
                     f'<text class="mark-label" x="{min(mx + 4, _LEFT + pw - 4):.1f}" y="{_TOP + ph - 6}" '
                     f'text-anchor="{"start" if mx + 60 < _LEFT + pw else "end"}">'
                     f'{escape(msg("html.chart_step"))} {mark_step}</text>')
    for i, v in bad[:MAX_MARKS]:
        cx, cy = ax.x(ax.at(i)), (_TOP + ph - 6 if v < 0 else _TOP + 6)
        parts.append(f'<path class="bad" d="M{cx - 4:.1f},{cy - 4:.1f}L{cx + 4:.1f},{cy + 4:.1f}'
                     f'M{cx - 4:.1f},{cy + 4:.1f}L{cx + 4:.1f},{cy - 4:.1f}">'
                     f'<title>{escape(msg("html.chart_step"))} {ax.at(i)}: {fmt(v)}</title></path>')
    return parts


def line_chart(name: str, values: Sequence[Any], *, mark_step: int | None = None,
               log: bool | None = None, chart_id: str = "c0", steps: Sequence[int] | None = None,
               overlay: tuple[str, Sequence[Any]] | None = None) -> str:
    """One `<figure>` holding an SVG line chart of `values` (index = step) and a text caption.

    Arguments:
        name: the series name (axis label and title).
        values: one value per step; None for a missing one; NaN/±Inf drawn as red crosses.
        mark_step: a step to mark with a dashed vertical line (the primary finding's step).
        log: force a log or linear y axis; None chooses log when positive values span
            two decades or more.
        chart_id: a document-unique id for the SVG's accessible title.
        steps: the step of each value, when they are not 0, 1, 2, ... (a long run's series kept
            in bounded memory: `Report.meta["series_steps"]`).
        overlay: (name, values) of a second series drawn dashed on the same axes (two runs'
            curves compared: `torchtriage diff`, issue 28).

    Returns:
        The HTML, or "" when the series has no value at all.

    Example:
        >>> line_chart("loss", [2.3, 1.1, None, float("nan")], mark_step=3)[:7]
        '<figure'
    """
    vals = [_value(v) for v in values]
    n = len(vals)
    finite = [(i, v) for i, v in enumerate(vals) if v is not None and math.isfinite(v)]
    bad = [(i, v) for i, v in enumerate(vals) if v is not None and not math.isfinite(v)]
    missing = sum(v is None for v in vals)
    if not finite and not bad:
        return ""
    ys = [v for _, v in finite]
    other = [_value(v) for v in overlay[1]] if overlay is not None else []
    other_finite = [(i, v) for i, v in enumerate(other) if v is not None and math.isfinite(v)][:MAX_POINTS]
    ax = _axes(ys + [v for _, v in other_finite], log, max(n, len(other)), steps)
    drawn = _buckets(finite, n) if len(finite) > MAX_POINTS else finite
    parts = _grid(ax) + _line(ax, vals, drawn) + _marks(ax, mark_step, bad)
    # (styled in place: the page's stylesheet stays as it is)
    dashed = 'class="line b" style="stroke: var(--warn); stroke-dasharray: 5 3"'
    parts += [p.replace('class="line"', dashed).replace('class="dot"', 'class="dot b" style="fill: var(--warn)"')
              for p in _line(ax, other, other_finite)]
    present = [v for v in vals if v is not None]
    desc = msg("html.chart_desc", name=name, n=n, first=fmt(present[0]), last=fmt(present[-1]),
               lo=fmt(min(ys)) if ys else "–", hi=fmt(max(ys)) if ys else "–")
    notes = [desc]
    if overlay is not None and other_finite:
        notes.append(msg("html.chart_desc", name=overlay[0], n=len(other), first=fmt(other_finite[0][1]),
                         last=fmt(other_finite[-1][1]), lo=fmt(min(v for _, v in other_finite)),
                         hi=fmt(max(v for _, v in other_finite))))
    if bad:
        notes.append(msg("html.chart_nonfinite", count=len(bad), step=ax.at(bad[0][0]), value=fmt(bad[0][1])))
    if missing:
        notes.append(msg("html.chart_gap", count=missing))
    if mark_step is not None and 0 <= mark_step <= ax.x_hi:
        notes.append(msg("html.chart_marker", step=mark_step))
    if drawn is not finite:
        notes.append(msg("html.chart_downsampled", n=n, buckets=len(drawn)))
    svg = (f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
           f'aria-labelledby="{chart_id}-t {chart_id}-d">'
           f'<title id="{chart_id}-t">{escape(name)}</title><desc id="{chart_id}-d">{escape(desc)}</desc>'
           + "".join(parts) + "</svg>")
    caption = "<br>".join(escape(s) for s in notes)
    return (f'<figure class="chart"><figcaption class="chart-title">{escape(name)}</figcaption>{svg}'
            f'<p class="chart-notes">{caption}</p></figure>')
