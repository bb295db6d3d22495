"""A copy that must follow its trained model and never moves (RL target networks, session 17).

A target network, a mean teacher or an EMA model is a copy of a trained model (equal to it when
the first optimizer step runs: `copy.deepcopy`, `load_state_dict(online.state_dict())`) that
its update moves toward that model over the run. `_averaged` finds those copies and measures,
at its readings, how each one moved and how far it is from its parameter. Its invariant, seen
from the other side: a copy that never moves while its model trains is no average of anything;
its outputs are those of the model as it was at the first step.

A frozen copy is often meant (a reference policy for a KL penalty, a teacher kept fixed), so
the verdict asks for this run's own evidence that this copy was meant to follow:

* a sibling copy (another model's copy, same run) is updated toward its model at every reading
  it moved (a soft or hard target update that runs);
* this copy never moved at any reading, and its distance to its model grew from the first
  reading to the last (by MIN_GROWTH and at least MIN_REL of the model's norm): the model
  trained away from it.

`silent.target_copy_frozen` (warning) names the copy, its model, the distances, the line the
copy is used at (its first call after discovery) and the sibling's update line.
"""

from __future__ import annotations

from typing import Any

from ._averaged import MIN_UPDATES, Pair

MIN_GROWTH = 2.0  # the frozen copy's distance to its model grows at least this much
MIN_REL = 0.01  # ... and ends at least this share of the model's norm


def _label(root: Any, names: dict[int, str]) -> str:
    m = root() if root is not None else None
    return "?" if m is None else names.get(id(m), type(m).__name__)


def _distance(pairs: list[Pair]) -> list[tuple[int, float, float]]:
    """(step, ||copy - model||, ||model||) over the group's readings (all pairs read together)."""
    by_step: dict[int, list[float]] = {}
    for p in pairs:
        for step, d, n in p.gaps:
            acc = by_step.setdefault(step, [0.0, 0.0, 0])
            acc[0] += d * d
            acc[1] += n * n
            acc[2] += 1
    return [(s, a[0] ** 0.5, a[1] ** 0.5) for s, a in sorted(by_step.items()) if a[2] == len(pairs)]


def frozen_copies(pairs: list[Pair], names: dict[int, str], used: dict[int, Any]) -> list[dict[str, Any]]:
    groups: dict[tuple[int, int], list[Pair]] = {}
    for p in pairs:
        copy, online = p.roots
        if copy is None or online is None or copy() is None or online() is None:
            continue
        groups.setdefault((id(copy()), id(online())), []).append(p)
    followed = {}
    for key, group in groups.items():
        moving = [p for p in group if len(p.coeffs) >= MIN_UPDATES]
        if moving and all(sorted(p.coeffs)[len(p.coeffs) // 2] > 0 for p in moving):
            followed[key] = moving[0]
    if not followed:
        return []
    out = []
    for key, group in groups.items():
        if key in followed or any(p.coeffs for p in group) or min(p.still for p in group) < MIN_UPDATES:
            continue
        siblings = [k for k in followed if k[0] != key[0] and k[1] != key[1]]
        if not siblings:
            continue
        series = _distance(group)
        if len(series) < MIN_UPDATES:
            continue
        (s0, d0, _), (s1, d1, n1) = series[0], series[-1]
        if not (d1 >= MIN_GROWTH * d0 and n1 > 0 and d1 >= MIN_REL * n1):
            continue
        sib = followed[siblings[0]]
        out.append({"copy": _label(group[0].roots[0], names), "model": _label(group[0].roots[1], names),
                    "sibling_copy": _label(sib.roots[0], names), "sibling_model": _label(sib.roots[1], names),
                    "sibling_pair": sib, "pairs": group, "first_step": s0, "last_step": s1,
                    "distance_first": d0, "distance_last": d1, "model_norm": n1,
                    "readings": len(series), "used_at": used.get(key[0])})
    return out
