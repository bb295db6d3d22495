"""Shrink a bundle's failing batch to the fewest samples (and, for sequences, the shortest
prefix) that still reproduce the same finding (seed G.7: one sample, one batch, one forward).

Samples are reduced by delta debugging (Zeller's ddmin): split the current set into n
chunks; keep a chunk that still fails (n back to 2), else a complement that still fails
(n - 1), else split finer (2n). A single culprit among N samples is found in about
2·log2(N) replays. The prefix is then found by bisection, assuming a failing prefix stays
failing when it grows (true for causal models and for a poisoned position).
Every replay is cached by its (samples, prefix), so no candidate runs twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .._catalogue import msg
from ._bundle import Bundle
from ._replay import ReplayResult


@dataclasses.dataclass(frozen=True)
class ShrinkResult:
    """What shrinking kept.

    Attributes:
        samples: indices (into the original batch) that remain.
        batch_size: the original number of samples.
        prefix: the shortest sequence prefix that still fails (None: not a sequence batch).
        seq_len: the original sequence length (None: not a sequence batch).
        replays: how many replays shrinking ran (the initial check included).
        bundle: the minimal bundle (in memory; `.save(path)` writes it).
    """

    samples: tuple[int, ...]
    batch_size: int
    prefix: int | None
    seq_len: int | None
    replays: int
    bundle: Bundle


def _fmt(items: list[int], n: int = 12) -> str:
    return "[" + ", ".join(map(str, items[:n])) + (", ..." if len(items) > n else "") + "]"


def ddmin(items: list[int], test: Callable[[list[int]], bool]) -> list[int]:
    """The 1-minimal failing subset of `items` by delta debugging (`test(subset)` is True
    when the subset still fails)."""
    n = 2
    while len(items) >= 2:
        size = len(items)
        chunks = [items[i * size // n:(i + 1) * size // n] for i in range(n)]
        chunks = [c for c in chunks if c]
        reduced = False
        for c in chunks:
            if test(c):
                items, n, reduced = c, 2, True
                break
        if not reduced and len(chunks) > 2:  # with 2 chunks the complements are the chunks
            for i in range(len(chunks)):
                comp = [x for j, c in enumerate(chunks) if j != i for x in c]
                if test(comp):
                    items, n, reduced = comp, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(items):
                break
            n = min(len(items), 2 * n)
    return items


def shrink(bundle: Bundle, run: Callable[[Bundle], ReplayResult], *,
           prefix: bool = True, log: Callable[[str], Any] | None = print) -> ShrinkResult | None:
    """Reduce the batch of `bundle` while `run(candidate).reproduced` stays True.

    Arguments:
        bundle: the loaded bundle.
        run: replays one candidate bundle (e.g. `lambda b: replay(b, factory=make_model)`).
        prefix: also shrink the sequence length of sequence batches.
        log: receives one progress line per replay (None: silent).

    Returns:
        A `ShrinkResult`, or None when the full batch does not reproduce the finding.

    Example:
        >>> r = shrink(load_bundle("b/"), lambda b: replay(b, factory=make_model))
        >>> r.samples
        (17,)
    """
    say = log or (lambda _line: None)
    n, length = bundle.batch_size, bundle.seq_len
    cache: dict[tuple[Any, ...], bool] = {}
    count = 0

    def test(samples: list[int] | None, pre: int | None) -> bool:
        nonlocal count
        key = (tuple(samples) if samples is not None else None, pre)
        if key not in cache:
            count += 1
            result = run(bundle.select(samples, pre))
            cache[key] = result.reproduced
            what = _fmt(samples) if samples is not None else "all"
            say(msg("repro.shrink.progress", n=count, size=len(samples) if samples is not None else n,
                    samples=what, prefix=pre if pre is not None else "-",
                    verdict=msg("repro.shrink.yes" if result.reproduced else "repro.shrink.no")))
        return cache[key]

    if not test(list(range(n)) if n else None, None):
        return None
    samples = list(range(n)) if n else []
    if n and n > 1:
        samples = ddmin(samples, lambda s: test(s, None))
    best = None
    if prefix and length and length > 1:
        lo, hi = 1, length  # invariant: prefix `hi` fails
        while lo < hi:
            mid = (lo + hi) // 2
            if test(samples or None, mid):
                hi = mid
            else:
                lo = mid + 1
        best = hi if hi < length else None
    minimal = bundle.select(samples or None, best)
    original = (bundle.meta.get("shrunk") or {}).get("samples_of_original")
    kept = [original[i] for i in samples] if original else samples
    return ShrinkResult(samples=tuple(kept), batch_size=int(n or 0), prefix=best, seq_len=length,
                        replays=count, bundle=minimal)
