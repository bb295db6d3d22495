"""Row-id columns (issue 14): a column unique within each split and disjoint across splits
names rows; it is not content. Compared as content it makes every row unique, so two identical
rows with different ids would never be reported as duplicates.

Only integer-valued columns and short strings without whitespace (``"img_0042"``, UUIDs) can
be ids: free text and real-valued measurements are unique and disjoint too, and are content.
Columns are first screened on train's first chunk (most columns drop out there, without a second
pass); the survivors are read in one more streaming pass, keeping 8 bytes per row per column.
`--ignore COLS` / ``ignore=`` declares ids by hand, `--content COLS` / ``content=`` keeps a
column as content.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._hashing import object_words
from ._sources import Source

MAX_ID_CHARS = 64
MIN_ROWS = 20  # in all splits together: on a handful of rows any integer column looks unique


def _id_like(cells: Any) -> bool:
    try:
        v = np.asarray(cells, dtype=np.float64)
    except (ValueError, TypeError):
        return all(isinstance(c, str) and 0 < len(c) <= MAX_ID_CHARS and not any(ch.isspace() for ch in c)
                   for c in cells)
    return bool(np.isfinite(v).all() and (v == np.round(v)).all())


def _unique(words: np.ndarray) -> bool:
    return np.unique(words).size == words.size


def id_columns(sources: list[Source], excluded: set[str], chunk: int) -> list[str]:
    """The table columns that are row ids; [] for other kinds or when no column is."""
    if sources[0].kind != "table":
        return []
    candidates = [c for c in sources[0].columns if c not in excluded]
    if len(candidates) < 2:
        return []  # a lone content column is never an id
    first = next(iter(sources[0].blocks(chunk)), None)
    if first is None or first.n < 2 or not first.cols:
        return []
    alive = [c for c in candidates if c in first.cols and _id_like(first.cols[c])
             and _unique(object_words(first.cols[c]))]
    if not alive:
        return []
    seen: dict[str, list[np.ndarray]] = {c: [] for c in alive}
    rows = 0
    for src in sources:
        per: dict[str, list[np.ndarray]] = {c: [] for c in alive}
        for block in src.blocks(chunk):
            rows += block.n
            for c in list(alive):
                cells = (block.cols or {}).get(c)
                if cells is None or not _id_like(cells):
                    alive.remove(c)
                    continue
                per[c].append(object_words(cells))
        for c in list(alive):
            words = np.concatenate(per[c]) if per[c] else np.zeros(0, np.uint64)
            if not _unique(words) or any(np.intersect1d(words, other, assume_unique=True).size for other in seen[c]):
                alive.remove(c)
            else:
                seen[c].append(words)
        if not alive:
            return []
    if rows < MIN_ROWS or len(alive) == len(candidates):
        return []  # every column would be an id: then they are the content
    return alive
