"""Shrink a bundle's failing batch to the fewest samples (and, for sequences, the shortest
prefix) that still reproduce the same finding (seed G.7: one sample, one batch, one forward).

Samples are reduced by recursive splitting (`ddmin`, the binary-splitting form of delta
debugging): a failing set is halved; a half that fails alone is kept, else both halves hold a
culprit, and each half is reduced with the other (then the first's result) kept in. k culprit
samples among n are found in at most 2·k·log2(n) + 4 replays (1 culprit in 256: 16; figures in
docs/repro.md, `python benchmarks/shrink.py`). The prefix is then found by bisection, assuming
a failing prefix stays failing when it grows (true for causal models and for a poisoned
position). Every replay is cached by its (samples, prefix), so no candidate runs twice.

A replay is *invalid* rather than "gone" when it raises another error than the trigger or adds
a broadcasting finding: the candidate broke the step (a tensor of the step was not sliced with
the batch, so `pred - y` now broadcasts or fails), it did not cure it. Invalid candidates are
not kept; when every candidate of a split is invalid, shrinking stops and says which tensor of
the step kept the full batch size (issue 11).
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
        invalid: when every candidate of the first split broke the step, what was not sliced
            (then `samples` is the whole batch).
    """

    samples: tuple[int, ...]
    batch_size: int
    prefix: int | None
    seq_len: int | None
    replays: int
    bundle: Bundle
    invalid: str | None = None  # why shrinking stopped: a tensor of the step was not sliced


def _fmt(items: list[int], n: int = 12) -> str:
    return "[" + ", ".join(map(str, items[:n])) + (", ..." if len(items) > n else "") + "]"


def ddmin(items: list[int], test: Callable[[list[int]], bool]) -> list[int]:
    """A minimal failing subset of `items` (`test(subset)` is True when the subset still fails;
    `test(items)` is assumed True). Each culprit costs about 2·log2(len(items)) tests."""
    items = list(items)

    def find(cands: list[int], fixed: list[int]) -> list[int]:
        if len(cands) <= 1:
            return cands
        half = len(cands) // 2
        left, right = cands[:half], cands[half:]
        if test(sorted(fixed + left)):
            return find(left, fixed)
        if test(sorted(fixed + right)):
            return find(right, fixed)
        # culprits on both sides (they fail only together): reduce each with the other kept in
        got_left = find(left, fixed + right)
        got_right = find(right, fixed + got_left)
        return sorted(got_left + got_right)

    return find(items, [])


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
    cache: dict[tuple[Any, ...], str] = {}
    count = 0
    invalid: list[ReplayResult] = []
    baseline: list[ReplayResult] = []

    def verdict(samples: list[int] | None, pre: int | None) -> str:
        nonlocal count
        key = (tuple(samples) if samples is not None else None, pre)
        if key not in cache:
            count += 1
            result = run(bundle.select(samples, pre))
            if baseline and _broke(result, baseline[0]):
                # broken, even if the finding came back along (a NaN sample seen before the
                # error): the candidate is not the step any more
                cache[key] = "invalid"
                invalid.append(result)
            elif result.reproduced:
                cache[key] = "yes"
            else:
                cache[key] = "no"
            if not baseline:
                baseline.append(result)
            what = _fmt(samples) if samples is not None else "all"
            say(msg("repro.shrink.progress", n=count, size=len(samples) if samples is not None else n,
                    samples=what, prefix=pre if pre is not None else "-",
                    verdict=msg(f"repro.shrink.{cache[key]}")))
        return cache[key]

    def test(samples: list[int] | None, pre: int | None) -> bool:
        return verdict(samples, pre) == "yes"

    if not test(list(range(n)) if n else None, None):
        return None
    samples = list(range(n)) if n else []
    if n and n > 1:
        half = n // 2
        first, second = verdict(samples[:half], None), verdict(samples[half:], None)
        if first == "invalid" and second == "invalid":
            # the whole first split broke the step: a tensor of the step was not sliced
            return ShrinkResult(samples=tuple(samples), batch_size=int(n), prefix=None, seq_len=length,
                                replays=count, bundle=bundle, invalid=_unsliced(bundle, invalid[0]))
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


def _broke(result: ReplayResult, full: ReplayResult) -> bool:
    """The candidate raised an error the full batch did not, or a new broadcasting finding."""
    if result.exception is not None and result.exception != full.exception and (
            full.exception is None or result.exception.split(":")[0] != full.exception.split(":")[0]):
        return True
    before = {f.code for f in full.report.findings}
    return any("broadcast" in f.code and f.code not in before for f in result.report.findings)


def _unsliced(bundle: Bundle, result: ReplayResult) -> str:
    """Which tensor of the step kept its full size: the bundle's tensors whose leading dimension
    is not the batch's, with where they entered the step, else the replay's error."""
    n = bundle.batch_size
    names = []
    for entry in (bundle.meta.get("batch") or {}).get("inputs", []):
        shape = entry.get("shape") or []
        if shape and shape[0] != n:
            names.append(f"{entry.get('where')} ({entry.get('file')}:{entry.get('line')}, shape {shape})")
    where = [f"{f.code} at {f.file}:{f.line}" for f in result.report.findings if f.file and f.severity.value != "info"]
    seen = "; ".join([*([result.exception] if result.exception else []), *where]) or "-"
    return msg("repro.shrink.unsliced", tensors="; ".join(names) or msg("repro.shrink.unrecorded"), seen=seen)
