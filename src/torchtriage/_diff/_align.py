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


def align(ra: dict[str, Any], rb: dict[str, Any]) -> Alignment:
    ea, eb = events(ra), events(rb)
    sa, sb = [signature(e) for e in ea], [signature(e) for e in eb]
    matcher = difflib.SequenceMatcher(None, sa, sb, autojunk=False)
    partner: dict[int, int] = {}
    loose_a: list[int] = []
    loose_b: list[int] = []
    blocks: list[tuple[str, int, int, int, int]] = matcher.get_opcodes()
    for tag, i1, i2, j1, j2 in blocks:
        if tag == "equal":
            partner.update(zip(range(i1, i2), range(j1, j2)))
        else:
            loose_a += range(i1, i2)
            loose_b += range(j1, j2)
    # code moved: an unmatched op of A with an unmatched twin in B (same signature and value)
    free_b = set(loose_b)
    for i in loose_a:
        twin = next((j for j in loose_b if j in free_b and sb[j] == sa[i] and _same_values(ea[i], eb[j]) < 0),
                    None)
        if twin is not None:
            partner[i] = twin
            free_b.discard(twin)
    gone_a = [i for i in loose_a if i not in partner and _base(ea[i]) not in LAYOUT_OPS]
    gone_b = sorted(j for j in free_b if _base(eb[j]) not in LAYOUT_OPS)
    total = max(len(ea), len(eb))
    if total and len(partner) < STRUCTURAL * total:
        first_a = ea[gone_a[0]] if gone_a else None
        first_b = eb[gone_b[0]] if gone_b else None
        return Alignment(len(partner), total, None, True, (first_a, first_b))
    # the first difference in A's order; a B-only op sits where its block starts in A
    where_b = {}
    for _tag, i1, _i2, j1, j2 in blocks:
        for j in range(j1, j2):
            where_b[j] = i1 - 0.5 + (j - j1) / max(1, j2 - j1 + 1)
    candidates: list[tuple[float, Difference]] = []
    for i, j in sorted(partner.items()):
        out = _same_values(ea[i], eb[j])
        if out >= 0:
            kind = "randomness" if ea[i].get("r") else "value"
            candidates.append((float(i), Difference(kind, ea[i], eb[j], out)))
            break
    replaced = {i: j for tag, i1, i2, j1, j2 in blocks if tag == "replace"
                for i, j in zip(range(i1, i2), range(j1, j2))}
    for i in gone_a:
        j = replaced.get(i)
        other = eb[j] if j is not None and j in free_b else None
        candidates.append((float(i), _op_difference(ea[i], other)))
        break
    for j in gone_b:
        if j not in replaced.values():
            candidates.append((where_b.get(j, float(len(ea))), Difference("op", None, eb[j])))
            break
    first = min(candidates, key=lambda c: c[0])[1] if candidates else None
    return Alignment(len(partner), total, first, False)
