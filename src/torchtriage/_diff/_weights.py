"""Which parameter of one run is which parameter of the other (issue 28).

By name when both runs name their tensors alike; else by shape and order (a module renamed
or regrouped keeps its tensors' order and shapes); else by name where name and shape agree.
The same mapping serves the initial weights copied from run A into run B and the parameter
updates compared after each step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _shape(v: Any) -> tuple[int, ...]:
    shape = getattr(v, "shape", None)
    if shape is None and isinstance(v, (list, tuple)) and v:
        shape = v[0]
    return tuple(shape or ())


def map_state(a: Sequence[tuple[str, Any]], b: Sequence[tuple[str, Any]]) -> tuple[list[tuple[str, str]], str]:
    """Pairs (name in A, name in B) and how they were matched: "name", "order" or "partial".
    Values are tensors or `[shape, ...]` records."""
    shapes_a = {k: _shape(v) for k, v in a}
    shapes_b = {k: _shape(v) for k, v in b}
    if set(shapes_a) == set(shapes_b) and all(shapes_a[k] == shapes_b[k] for k in shapes_a):
        return [(k, k) for k, _ in a], "name"
    if len(a) == len(b) and all(_shape(va) == _shape(vb) for (_, va), (_, vb) in zip(a, b)):
        return [(ka, kb) for (ka, _), (kb, _) in zip(a, b)], "order"
    pairs = [(k, k) for k, _ in a if k in shapes_b and shapes_b[k] == shapes_a[k]]
    return pairs, "partial"
