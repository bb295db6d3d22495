"""`SeriesStore`: per-step measurements (loss, grad norm, lr, ...) in bounded memory.

A run of a million steps must not grow the session's memory with it (issue 19). Each series
keeps, as (step, value) points:

  * the first `HEAD` points exactly (the start of a run is where most schedules and
    divergences begin);
  * the last `TAIL` points exactly, in a ring buffer;
  * between them, a decimated sample: every `stride`-th point, the stride doubling whenever
    the sample would exceed `MIDDLE` points;
  * exact points near an anomaly: `pin(step, radius)` keeps the points of that window when they
    leave the ring buffer (at most `MAX_PINS` windows).

So a series never holds more than HEAD + TAIL + MIDDLE + MAX_PINS * (2 * radius + 1) points.
The store is read-only for everyone but its writer (`Session.record_series`): `points(name)`,
`values(name)`, `last(name)`, `names()` are the public accessors the HTML report and loggers use.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

HEAD = 2000
TAIL = 1000
MIDDLE = 2000
MAX_PINS = 16

Point = tuple[int, "float | None"]


class _Series:
    __slots__ = ("head", "tail", "middle", "stride", "evicted", "pinned", "count")

    def __init__(self) -> None:
        self.head: list[Point] = []
        self.tail: collections.deque[Point] = collections.deque(maxlen=TAIL)
        self.middle: list[Point] = []
        self.stride = 1
        self.evicted = 0  # points that left the ring buffer so far
        self.pinned: dict[int, list[Point]] = {}
        self.count = 0

    def add(self, step: int, value: float | None, pins: list[tuple[int, int]]) -> None:
        self.count += 1
        if len(self.head) < HEAD:
            self.head.append((step, value))
            return
        if len(self.tail) == TAIL:
            old = self.tail[0]
            if any(lo <= old[0] <= hi for lo, hi in pins):
                self.pinned.setdefault(old[0], []).append(old)
            elif self.evicted % self.stride == 0:
                self.middle.append(old)
                if len(self.middle) > MIDDLE:
                    self.middle = self.middle[::2]
                    self.stride *= 2
            self.evicted += 1
        self.tail.append((step, value))

    def points(self) -> list[Point]:
        extra = sorted((p for ps in self.pinned.values() for p in ps), key=lambda p: p[0])
        middle = sorted(self.middle + extra, key=lambda p: p[0]) if extra else self.middle
        return [*self.head, *middle, *self.tail]

    @property
    def dense(self) -> bool:
        return self.evicted == 0


class SeriesStore:
    """Named per-step series in bounded memory (see the module docstring).

    Example:
        >>> store = SeriesStore()
        >>> store.add("loss", 0, 2.3)
        >>> store.points("loss"), store.last("loss")
        ([(0, 2.3)], 2.3)
    """

    def __init__(self) -> None:
        self._series: dict[str, _Series] = {}
        self._pins: list[tuple[int, int]] = []

    def add(self, name: str, step: int, value: float | None) -> None:
        s = self._series.get(name)
        if s is None:
            s = self._series[name] = _Series()
        s.add(step, value, self._pins)

    def pin(self, step: int, radius: int = 50) -> None:
        """Keep the exact points within `radius` steps of `step` (an anomaly) in every series."""
        window = (step - radius, step + radius)
        if window not in self._pins and len(self._pins) < MAX_PINS:
            self._pins.append(window)

    def names(self) -> list[str]:
        return list(self._series)

    def points(self, name: str) -> list[Point]:
        """The kept (step, value) points of a series, in step order ([] when unknown)."""
        s = self._series.get(name)
        return s.points() if s is not None else []

    def values(self, name: str) -> list[float | None]:
        return [v for _, v in self.points(name)]

    def last(self, name: str) -> float | None:
        s = self._series.get(name)
        if s is None or not s.count:
            return None
        return s.tail[-1][1] if s.tail else s.head[-1][1]

    def since(self, name: str, n: int) -> list[Point]:
        """The points recorded after the first `n` values (for a reader that polls every step:
        cheap, the newest points only). Points already dropped from memory are not returned."""
        s = self._series.get(name)
        if s is None or s.count <= n:
            return []
        new = s.count - n
        if not s.tail:
            return s.head[-new:]
        tail = list(s.tail)[-new:] if new < len(s.tail) else list(s.tail)
        if new > len(tail) and not s.evicted:
            return [*s.head[-(new - len(tail)):], *tail]
        return tail

    def count(self, name: str) -> int:
        """How many values were recorded (kept or not)."""
        s = self._series.get(name)
        return s.count if s is not None else 0

    def decimated(self) -> list[str]:
        """The series whose points are not all kept (their steps go in the report's meta)."""
        return [k for k, s in self._series.items() if not s.dense]

    def __iter__(self) -> Iterator[str]:
        return iter(self._series)

    def __len__(self) -> int:
        return len(self._series)
