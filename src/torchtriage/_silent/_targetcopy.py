"""Copies that must follow their trained model: one never moves, one never started as a copy
(RL target networks, session 17).

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
* this copy never moved at any reading, holds at the end of the run the values it had at the
  first step (`AveragedCopies.unchanged`: a hard copy every N steps between readings moved it),
  and its distance to its model grew from the first
  reading to the last (by MIN_GROWTH and at least MIN_REL of the model's norm): the model
  trained away from it.

`silent.target_copy_frozen` (warning) names the copy, its model, the distances, the line the
copy is used at (its first call after discovery) and the sibling's update line.

The second invariant: a copy that its update pulls toward a model starts equal to it. A target
network built beside its model (same class, same parameters) and soft-updated toward it but
never copied from it (`_twins`: paired by structure, not value) computes its targets with an
unrelated network until the soft updates have closed the gap. Its intent is measured the same
way (a sibling copy started equal to its model and follows it; this one's updates are convex
combinations toward its model: 0 < a <= 1 at every reading that moved it), and the harm is the
distance at the first step: at least MIN_APART of its model's norm (two independent
initialisations sit about sqrt(2) apart). `silent.target_copy_unsynced` (warning).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._averaged import MIN_UPDATES, Pair

MIN_GROWTH = 2.0  # the frozen copy's distance to its model grows at least this much
MIN_REL = 0.01  # ... and ends at least this share of the model's norm
MIN_APART = 0.5  # an unsynced copy's distance to its model at the first step, in its model's norm


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


def _groups(pairs: list[Pair]) -> dict[tuple[int, int], list[Pair]]:
    """The pairs by (copy's model, parameter's model)."""
    groups: dict[tuple[int, int], list[Pair]] = {}
    for p in pairs:
        copy, online = p.roots
        if copy is None or online is None or copy() is None or online() is None:
            continue
        groups.setdefault((id(copy()), id(online())), []).append(p)
    return groups


def _followed(groups: dict[tuple[int, int], list[Pair]]) -> dict[tuple[int, int], Pair]:
    """Copies paired by value whose updates move them toward their model (a pair of each)."""
    followed = {}
    for key, group in groups.items():
        moving = [p for p in group if len(p.coeffs) >= MIN_UPDATES]
        if moving and all(p.start is None for p in group) \
                and all(sorted(p.coeffs)[len(p.coeffs) // 2] > 0 for p in moving):
            followed[key] = moving[0]
    return followed


def frozen_copies(pairs: list[Pair], names: dict[int, str], used: dict[int, Any],
                  unchanged: Callable[[list[Pair]], bool]) -> list[dict[str, Any]]:
    groups = _groups(pairs)
    followed = _followed(groups)
    if not followed:
        return []
    out = []
    for key, group in groups.items():
        if key in followed or any(p.coeffs or p.start is not None for p in group) \
                or min(p.still for p in group) < MIN_UPDATES:
            continue
        siblings = [k for k in followed if k[0] != key[0] and k[1] != key[1]]
        if not siblings:
            continue
        series = _distance(group)
        if len(series) < MIN_UPDATES:
            continue
        (s0, d0, _), (s1, d1, n1) = series[0], series[-1]
        if not (d1 >= MIN_GROWTH * d0 and n1 > 0 and d1 >= MIN_REL * n1) or not unchanged(group):
            continue
        sib = followed[siblings[0]]
        out.append({"copy": _label(group[0].roots[0], names), "model": _label(group[0].roots[1], names),
                    "sibling_copy": _label(sib.roots[0], names), "sibling_model": _label(sib.roots[1], names),
                    "sibling_pair": sib, "pairs": group, "first_step": s0, "last_step": s1,
                    "distance_first": d0, "distance_last": d1, "model_norm": n1,
                    "readings": len(series), "used_at": used.get(key[0])})
    return out


def unsynced_copies(pairs: list[Pair], names: dict[int, str], used: dict[int, Any]) -> list[dict[str, Any]]:
    groups = _groups(pairs)
    followed = _followed(groups)
    out = []
    for key, group in groups.items():
        start = group[0].start
        if start is None or key in followed:
            continue
        siblings = [k for k in followed if k[0] != key[0] and k[1] != key[1]]
        coeffs = sorted(c for p in group for c in p.coeffs)
        moving = [p for p in group if len(p.coeffs) >= MIN_UPDATES]
        if not siblings or len(moving) * 2 < len(group) or not coeffs or not 0 < coeffs[0] <= coeffs[-1] <= 1:
            continue
        series = _distance(group)
        if len(series) < MIN_UPDATES or used.get(key[0]) is None:
            continue
        norm = series[0][2]
        if not (norm > 0 and start >= MIN_APART * norm):
            continue
        sib = followed[siblings[0]]
        out.append({"copy": _label(group[0].roots[0], names), "model": _label(group[0].roots[1], names),
                    "sibling_copy": _label(sib.roots[0], names), "sibling_model": _label(sib.roots[1], names),
                    "sibling_pair": sib, "pairs": group, "distance_start": start, "model_norm": norm,
                    "distance_first": series[0][1], "first_step": series[0][0],
                    "distance_last": series[-1][1], "last_step": series[-1][0],
                    "coefficient": coeffs[len(coeffs) // 2], "readings": len(series), "used_at": used.get(key[0])})
    return out
