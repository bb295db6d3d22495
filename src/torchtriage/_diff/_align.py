"""Where two op sequences part (issue 28): align, then find the first difference.

The two runs' events (`_record.py`) are aligned on their signatures — step, aten op, output
shapes and dtypes; not the module path, which a rename changes, nor the line — with difflib's
longest matching blocks, so code moved around, split into functions or renamed lines up. An
op that one run lacks and the other has within the same step, with the same value, is code
moved (two independent lines swapped), not a difference; a view-only op (`view`, `t`,
`reshape`, ...) present in one run only is layout. What is left, in run A's order:

    op         an op run A has and B has not (or another op in its place: `mean` for `sum`)
    shape      the same op with outputs of other shapes
    dtype      the same op with outputs of other dtypes
    value      the same op and shapes, values apart beyond the dtype's tolerance
    randomness as value, on an op that draws random numbers (dropout, randn)

When fewer than half of the events align, the programs are not two versions of one
computation: `Alignment.structural` is set and no value is compared.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence
from typing import Any

from ._fingerprint import same_value

# ops that only re-view the same values: one run's `x.view(...)` is the other's layout
LAYOUT_OPS = frozenset({"aten::view", "aten::_unsafe_view", "aten::reshape", "aten::t", "aten::transpose",
                        "aten::permute", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::alias",
                        "aten::contiguous", "aten::clone", "aten::lift_fresh", "aten::_to_copy",
                        "aten::as_strided", "aten::flatten"})
STRUCTURAL = 0.5  # fewer aligned events than this share of the longer run: not one program


@dataclasses.dataclass
class Difference:
    kind: str  # op | shape | dtype | value | randomness
    a: dict[str, Any] | None
    b: dict[str, Any] | None
    output: int = 0  # which output differs (value)
    # a stretch computed differently: the last op of each side's stretch (what it ends in)
    ends: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)


@dataclasses.dataclass
class Alignment:
    pairs: int
    total: int
    first: Difference | None
    structural: bool
    unmatched: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None)


def events(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in record.get("ops", []) if not str(e.get("o", "")).startswith("profiler::")]


def signature(e: dict[str, Any]) -> tuple[Any, ...]:
    name = "input" if e.get("k") == "input" else e["o"]
    return (e["s"], name, tuple((tuple(o[0]), o[1]) for o in e["out"]))


def _same_values(a: dict[str, Any], b: dict[str, Any]) -> int:
    """-1 when all outputs agree, else the first output that differs."""
    for i, (oa, ob) in enumerate(zip(a["out"], b["out"])):
        if not same_value(oa[2], ob[2], oa[1]):
            return i
    return -1


def _base(e: dict[str, Any]) -> str:
    return str(e["o"]).split(".")[0]


def _op_difference(a: dict[str, Any] | None, b: dict[str, Any] | None) -> Difference:
    if a is not None and b is not None and a["o"] == b["o"] and len(a["out"]) == len(b["out"]):
        if any(oa[0] != ob[0] for oa, ob in zip(a["out"], b["out"])):
            return Difference("shape", a, b)
        return Difference("dtype", a, b)
    return Difference("op", a, b)


REORDER_WINDOW = 64  # events either side in which a value paired with another is looked for


def _found_near(e: dict[str, Any], other: list[dict[str, Any]], at: int) -> bool:
    """Each of `e`'s values is computed near position `at` of the other run, in the same step:
    two independent computations run in the other order (the gradients of q, k and v of an
    attention come back in another order after a refactor), not a difference."""
    lo, hi = max(0, at - REORDER_WINDOW), min(len(other), at + REORDER_WINDOW + 1)
    near = [other[k] for k in range(lo, hi) if other[k]["s"] == e["s"]]
    return _values_among(e, near)


def _regions(blocks: Sequence[tuple[str, int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """The unaligned stretches between aligned blocks: (A start, A end, B start, B end)."""
    out: list[tuple[int, int, int, int]] = []
    open_: list[int] | None = None
    for tag, i1, i2, j1, j2 in blocks:
        if tag == "equal":
            if open_ is not None:
                out.append((open_[0], open_[1], open_[2], open_[3]))
                open_ = None
        elif open_ is None:
            open_ = [i1, i2, j1, j2]
        else:
            open_[1], open_[3] = i2, j2
    if open_ is not None:
        out.append((open_[0], open_[1], open_[2], open_[3]))
    return out


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _values_among(e: dict[str, Any], events: list[dict[str, Any]]) -> bool:
    """Every output of `e` is among the values `events` compute (same size, dtype and value)."""
    outs = [o for o in e["out"] if o[2] is not None]
    made = [o for x in events for o in x["out"] if o[2] is not None]
    return bool(outs) and all(any(_numel(o[0]) == _numel(m[0]) and o[1] == m[1] and same_value(o[2], m[2], o[1])
                                  for m in made) for o in outs)


def _last(stretch: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The stretch's last op that computes (not a view or copy of its result)."""
    return next((e for e in reversed(stretch) if _base(e) not in LAYOUT_OPS and _base(e) != "aten::detach"),
                stretch[-1] if stretch else None)


def _ends_in(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """The result of `a`'s last op (before the views and copies that only re-lay it out; its
    first output: the others of a fused kernel are what it saves for backward, a logsumexp) is
    among the values `b` computes."""
    last = _last(a)
    return last is not None and bool(last["out"]) and _values_among(dict(last, out=last["out"][:1]), b)


def _same_result(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Two different stretches of ops that end in the same values (manual attention ported to a
    fused kernel, a hand-written softmax replaced by `torch.softmax`): the same computation.
    A stretch one run lacks entirely (a `detach()`, a `~mask`) is never that."""
    if not a or not b or any(e.get("k") == "input" for e in a + b):
        return False
    return _ends_in(a, b) and _ends_in(b, a)


def align(ra: dict[str, Any], rb: dict[str, Any]) -> Alignment:
    ea, eb = events(ra), events(rb)
    sa, sb = [signature(e) for e in ea], [signature(e) for e in eb]
    matcher = difflib.SequenceMatcher(None, sa, sb, autojunk=False)
    partner: dict[int, int] = {}
    loose_a: list[int] = []
    loose_b: list[int] = []
    blocks = matcher.get_opcodes()
    same_result: set[tuple[str, int]] = set()  # ops of a region re-implemented with the same result
    for tag, i1, i2, j1, j2 in blocks:
        if tag == "equal":
            partner.update(zip(range(i1, i2), range(j1, j2)))
    regions = _regions(blocks)
    for i1, i2, j1, j2 in regions:
        if _same_result(ea[i1:i2], eb[j1:j2]):
            same_result.update([("a", i) for i in range(i1, i2)] + [("b", j) for j in range(j1, j2)])
        else:
            loose_a += range(i1, i2)
            loose_b += range(j1, j2)
    # code moved: an unmatched op of A with an unmatched twin in B (same signature and value)
    free_b = set(loose_b)
    for i in loose_a:
        twin: int | None = next((j for j in loose_b if j in free_b and sb[j] == sa[i]
                                 and _same_values(ea[i], eb[j]) < 0), None)
        if twin is not None:
            partner[i] = twin
            free_b.discard(twin)
    gone_a = [i for i in loose_a if i not in partner and _base(ea[i]) not in LAYOUT_OPS]
    gone_b = sorted(j for j in free_b if _base(eb[j]) not in LAYOUT_OPS)
    # a run that raised stopped early: the share aligned is of the shorter one
    total = min(len(ea), len(eb)) if ra.get("raised") or rb.get("raised") else max(len(ea), len(eb))
    matched = len(partner) + len(same_result) // 2
    if total and matched < STRUCTURAL * total:
        first_a = ea[gone_a[0]] if gone_a else None
        first_b = eb[gone_b[0]] if gone_b else None
        return Alignment(matched, total, None, True, (first_a, first_b))
    # the first difference in A's order: a pair of aligned ops whose values part, or a stretch
    # of ops that only one run has or that each run computes differently (its first op each side)
    candidates: list[tuple[float, Difference]] = []
    for i, j in sorted(partner.items()):
        out = _same_values(ea[i], eb[j])
        if out >= 0 and not (_found_near(ea[i], eb, j) and _found_near(eb[j], ea, i)):
            kind = "randomness" if ea[i].get("r") else "value"
            candidates.append((float(i), Difference(kind, ea[i], eb[j], out)))
            break
    set_a, set_b = set(gone_a), set(gone_b)
    for i1, i2, j1, j2 in regions:
        in_a = [i for i in range(i1, i2) if i in set_a]
        in_b = [j for j in range(j1, j2) if j in set_b]
        if in_a or in_b:
            where = float(in_a[0]) if in_a else i1 - 0.5
            d = _op_difference(ea[in_a[0]] if in_a else None, eb[in_b[0]] if in_b else None)
            d.ends = (_last(ea[i1:i2]), _last(eb[j1:j2]))
            candidates.append((where, d))
            break
    first = min(candidates, key=lambda c: c[0])[1] if candidates else None
    return Alignment(matched, total, first, False)
