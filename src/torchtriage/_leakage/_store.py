"""Where the scanned parts live and how they are compared: one interface, three engines.

A check first scans every split into parts (`_scan.Part`: per-row digests, keys and
signatures, never the rows), then asks its store a handful of questions. Every engine answers
the same questions with the same numbers, so the findings built from the answers (in
`_checks.py`) are the same whatever the engine (issue 17):

* `MemoryStore` (here): numpy arrays in this process; the default for small inputs.
* `DuckStore` (`_duck.py`): tables in an embedded DuckDB database that spills to disk under
  a memory cap: inputs larger than memory on one machine.
* `DaskStore` (`_dask.py`): Dask DataFrames on a cluster, for data beyond one machine.

Rows are numbered from 0 within each split, in reading order. Examples are chosen by a rule
that does not depend on the engine (smallest row numbers, smallest digests).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._near import band_keys, pairs_by_bands, similarity

MAX_EXAMPLES = 5
MAX_GROUPS = 20
BAND_CAP = 32  # each band key pairs a row of the later split with at most this many earlier rows


@dataclasses.dataclass
class GroupOverlap:
    common: list[str]      # the first MAX_GROUPS shared keys, sorted
    count: int             # shared keys in all
    groups_a: int
    groups_b: int
    rows_a: int            # rows of a whose key is shared
    rows_b: int


@dataclasses.dataclass
class TimeOrder:
    end_a: float
    start_b: float
    early: int                              # rows of b earlier than the end of a
    examples: list[tuple[int, float]]       # (row of b, time), earliest first


@dataclasses.dataclass
class Matches:
    count: int                              # rows of b with an exact copy in a
    examples: list[tuple[int, int]]         # (first row of a, row of b), by row of b


@dataclasses.dataclass
class Repeats:
    repeated: int                           # rows minus distinct inputs
    inputs: int                             # inputs that occur more than once
    examples: list[list[int]]               # rows of each repeated input (first 4), by first row


@dataclasses.dataclass
class Conflicts:
    count: int                                      # inputs seen with more than one label
    examples: Sequence[Sequence[tuple[int, int, int | str]]]  # (split index, row, label word or, from dask, its text)


@dataclasses.dataclass
class Near:
    rows: int                                       # rows of b with a near copy in a
    examples: list[tuple[int, int, float]]          # (row of a, row of b, similarity), most similar first


def choose_examples(ia: np.ndarray, ib: np.ndarray, sim: np.ndarray) -> list[tuple[int, int, float]]:
    """The most similar pair of each row of b, best first; ties by (row of a, row of b)."""
    order = np.lexsort((ib, ia, -sim))
    out: list[tuple[int, int, float]] = []
    seen: set[int] = set()
    for k in order:
        j = int(ib[k])
        if j in seen:
            continue
        seen.add(j)
        out.append((int(ia[k]), j, float(sim[k])))
        if len(out) >= MAX_EXAMPLES:
            break
    return out


class Store:
    """What every engine answers. Split names are "train", "val", "test"."""

    engine = "?"

    def add(self, split: str, part: Any) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """All parts are in: build what the questions need (indexes, tables)."""

    def close(self) -> None:
        """Free what the store holds (temporary files, a cluster's memory)."""

    def rows(self, split: str) -> int:
        raise NotImplementedError

    def has_labels(self, split: str) -> bool:
        raise NotImplementedError

    def has_groups(self, split: str) -> bool:
        raise NotImplementedError

    def has_times(self, split: str) -> bool:
        raise NotImplementedError

    def near_kind(self, split: str) -> str | None:
        raise NotImplementedError

    def group_overlap(self, a: str, b: str) -> GroupOverlap | None:
        raise NotImplementedError

    def time_order(self, a: str, b: str) -> TimeOrder | None:
        raise NotImplementedError

    def exact(self, a: str, b: str, exclude_b: np.ndarray | None = None) -> Matches:
        """`exclude_b`: rows of b not to count (the same index of one dataset, said elsewhere)."""
        raise NotImplementedError

    def repeats(self, split: str) -> Repeats:
        raise NotImplementedError

    def conflicts(self, splits: list[str]) -> Conflicts:
        raise NotImplementedError

    def near(self, a: str, b: str, threshold: float) -> Near:
        raise NotImplementedError


class MemoryStore(Store):
    """Numpy arrays in this process (the scans of `_scan.Scanner.scan`)."""

    engine = "memory"

    def __init__(self) -> None:
        self.scans: dict[str, Any] = {}

    def put(self, split: str, scan: Any) -> None:
        self.scans[split] = scan

    def rows(self, split: str) -> int:
        return int(self.scans[split].n)

    def has_labels(self, split: str) -> bool:
        return self.scans[split].labels is not None

    def has_groups(self, split: str) -> bool:
        return bool(self.scans[split].groups)

    def has_times(self, split: str) -> bool:
        t = self.scans[split].times
        return t is not None and len(t) > 0

    def near_kind(self, split: str) -> str | None:
        s = self.scans[split]
        return s.near_kind if s.near_sig is not None else None

    def group_overlap(self, a: str, b: str) -> GroupOverlap | None:
        ga: Counter = self.scans[a].groups
        gb: Counter = self.scans[b].groups
        common = sorted(set(ga) & set(gb))
        if not common:
            return None
        return GroupOverlap(common[:MAX_GROUPS], len(common), len(ga), len(gb),
                            int(sum(ga[g] for g in common)), int(sum(gb[g] for g in common)))

    def time_order(self, a: str, b: str) -> TimeOrder | None:
        ta, tb = self.scans[a].times, self.scans[b].times
        end = np.nanmax(ta)
        early = np.nonzero(tb < end)[0]
        if not len(early):
            return None
        first = early[np.argsort(tb[early], kind="stable")[:MAX_EXAMPLES]]
        return TimeOrder(float(end), float(np.nanmin(tb)), int(len(early)), [(int(i), float(tb[i])) for i in first])

    def exact(self, a: str, b: str, exclude_b: np.ndarray | None = None) -> Matches:
        ea, eb = self.scans[a].exact, self.scans[b].exact
        order = np.argsort(ea, kind="stable")
        sa = ea[order]
        pos = np.searchsorted(sa, eb)
        hit = (pos < len(sa)) & (sa[np.minimum(pos, len(sa) - 1)] == eb)
        rows = np.nonzero(hit)[0]
        if exclude_b is not None and len(rows):
            rows = rows[~exclude_b[rows]]
        return Matches(int(len(rows)), [(int(order[pos[j]]), int(j)) for j in rows[:MAX_EXAMPLES]])

    def repeats(self, split: str) -> Repeats:
        t = self.scans[split]
        vals, first, inv, counts = np.unique(t.exact, return_index=True, return_inverse=True, return_counts=True)
        dup = np.nonzero(counts > 1)[0]
        ex = [[int(i) for i in np.nonzero(inv == k)[0][:4]] for k in dup[np.argsort(first[dup])][:MAX_EXAMPLES]]
        return Repeats(int(t.n - len(vals)), int(len(dup)), ex)

    def conflicts(self, splits: list[str]) -> Conflicts:
        scans = [self.scans[s] for s in splits]
        ex = np.concatenate([s.exact for s in scans])
        lab = np.concatenate([s.labels for s in scans])
        owner = np.concatenate([np.full(s.n, k) for k, s in enumerate(scans)])
        row = np.concatenate([np.arange(s.n) for s in scans])
        order = np.lexsort((lab, ex))
        e, lb = ex[order], lab[order]
        start = np.r_[True, e[1:] != e[:-1]]
        run = np.cumsum(start) - 1
        bad = np.unique(run[lb != lb[start][run]])
        starts = np.nonzero(start)[0]
        ends = np.r_[starts[1:], len(e)]
        examples = []
        for r in bad[:MAX_EXAMPLES]:
            idx = order[starts[r]:ends[r]]
            idx = idx[np.lexsort((row[idx], owner[idx]))][:6]  # split order, then row
            examples.append([(int(owner[i]), int(row[i]), int(lab[i])) for i in idx])
        return Conflicts(int(len(bad)), examples)

    def near(self, a: str, b: str, threshold: float) -> Near:
        sa, sb = self.scans[a], self.scans[b]
        kind = sa.near_kind
        va, vb = np.nonzero(sa.near_valid)[0], np.nonzero(sb.near_valid)[0]
        if not len(va) or not len(vb):
            return Near(0, [])
        ia, ib = pairs_by_bands(band_keys(kind, sa.near_sig[va], threshold),
                                band_keys(kind, sb.near_sig[vb], threshold), BAND_CAP)
        ia, ib = va[ia], vb[ib]
        sim = similarity(kind, sa.near_sig[ia], sb.near_sig[ib])
        keep = (sim >= threshold) & (sa.exact[ia] != sb.exact[ib])
        ia, ib, sim = ia[keep], ib[keep], sim[keep]
        return Near(int(len(np.unique(ib))), choose_examples(ia, ib, sim))
