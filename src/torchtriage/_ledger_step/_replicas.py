"""Every model an optimizer steps stays one model across the ranks (issue 26, session 8).

The DDP replica watch in `_ranks.py` compares the models the session sees wrapped in
DistributedDataParallel. A job whose gradients are never synced often has no such model: the
model was never wrapped (a hand-written all-reduce forgotten, a second network added beside the
wrapped one), or the wrapper was built and then bypassed from its first call (`get_network(net)`
returning `net.module`), so the session only ever sees the inner module. What every data-parallel
job must satisfy is stated on the optimizers instead: the parameters an optimizer steps are the
same on every rank before each step, unless the user trains one model per rank on purpose.

How intent is told apart, from this run's numbers only:

- the parameters already differ before the optimizer's first step (a seed per rank, an ensemble,
  shards of a tensor-parallel layer): models per rank, never compared further;
- the replicas differ at some step and agree again at a later one (local SGD, periodic averaging):
  they are synced, only less often than every step.

What is left is drift: identical when the first step ran, different at a later step and at every
step compared after it. Each rank keeps, before the optimizer's step at the sampled steps, one L1
norm per parameter (one `_foreach_norm`, kept on the device, read once at the end) with the line
of the first `optimizer.step()` it saw; the records ride the rank's report (meta `step_ranks`,
key `optimizers`) and `compare_optimizers` judges them on rank 0 at the merge.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack

KEEP = 48  # recorded steps per optimizer (thinned by half past it, the first 16 kept)
RTOL = 1e-6
MAX_PARAMS = 4096


def _dtensor(t: torch.Tensor) -> bool:
    return isinstance(getattr(t, "_local_tensor", None), torch.Tensor)


class _Stepped:
    """One optimizer: its parameters' names, the line of its step, its per-step norms."""

    def __init__(self, index: int, names: list[str], label: str | None, line: str | None) -> None:
        self.index = index
        self.names = names
        self.label = label
        self.line = line
        self.prints: list[tuple[int, torch.Tensor]] = []


class OptimizerPrints:
    """This rank's record: per optimizer, per sampled step, the norms before the step."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.seen: dict[int, _Stepped] = {}  # id(optimizer) -> its record

    def pre_step(self, opt: torch.optim.Optimizer, step: int) -> None:
        params = [p for g in opt.param_groups for p in g["params"]
                  if isinstance(p, torch.Tensor) and p.requires_grad and p.is_floating_point()
                  and p.numel() and not _dtensor(p)]
        if not params or len(params) > MAX_PARAMS:
            return
        rec = self.seen.get(id(opt))
        if rec is None or len(rec.names) != len(params):
            if rec is not None:  # param groups changed: a new record, compared on its own
                rec.prints.clear()
            index = self.session.param_index
            names = [index.name(p) or f"param_groups[?][{i}]" for i, p in enumerate(params)]
            info = index.info(params[0])
            frame = user_frame_from_stack(3)
            rec = _Stepped(len(self.seen), names, info.label if info is not None else None,
                           f"{frame.file}:{frame.line}" if isinstance(frame, UserFrame) else None)
            self.seen[id(opt)] = rec
        if rec.prints and rec.prints[-1][0] == step:
            return
        with torch.no_grad():
            try:
                norms = torch.stack([n.double() for n in torch._foreach_norm([p.detach() for p in params], 1)])
            except Exception:
                norms = torch.stack([p.detach().double().abs().sum() for p in params])
        rec.prints.append((step, norms))
        if len(rec.prints) > KEEP:
            rec.prints = rec.prints[:16] + rec.prints[17::2]

    def record(self) -> list[dict[str, Any]]:
        out = []
        for rec in sorted(self.seen.values(), key=lambda r: r.index):
            if not rec.prints:
                continue
            out.append({"index": rec.index, "label": rec.label, "names": rec.names, "line": rec.line,
                        "steps": [s for s, _ in rec.prints],
                        "prints": [n.cpu().tolist() for _, n in rec.prints]})
        self.seen.clear()
        return out


# ---------------------------------------------------------------------- on rank 0, at the merge
def _differ(names: list[str], a: list[float], b: list[float]) -> list[str]:
    return [n for n, x, y in zip(names, a, b)
            if not math.isclose(x, y, rel_tol=RTOL, abs_tol=1e-12) and not (x != x and y != y)]


def _gap(a: list[float], b: list[float]) -> float:
    """The largest relative difference of two ranks' norms."""
    out = 0.0
    for x, y in zip(a, b):
        if math.isfinite(x) and math.isfinite(y):
            out = max(out, abs(x - y) / max(abs(x), abs(y), 1e-12))
    return out


def _judge(mine: dict[str, Any], other: dict[str, Any]) -> tuple[int, int, list[str], float, int] | None:
    """(first step differing, last step compared, parameters differing there, the relative gap at
    the last step, steps compared) when the two ranks' replicas drifted, else None."""
    theirs = dict(zip(other["steps"], other["prints"]))
    common = [(s, p, theirs[s]) for s, p in zip(mine["steps"], mine["prints"]) if s in theirs]
    if len(common) < 2:
        return None
    first_step, first_a, first_b = common[0]
    if first_step != mine["steps"][0] or first_step != other["steps"][0] or _differ(mine["names"], first_a, first_b):
        return None  # not identical at the first step both recorded: models per rank (or not seen from the start)
    diverged: int | None = None
    for step, a, b in common[1:]:
        if _differ(mine["names"], a, b):
            if diverged is None:
                diverged = step
        elif diverged is not None:
            return None  # equal again after differing: synced now and then (local SGD, averaging)
    if diverged is None:
        return None
    last, a, b = common[-1]
    return diverged, last, _differ(mine["names"], a, b), _gap(a, b), len(common)


def compare_optimizers(recs: dict[int, dict[str, Any]]) -> list[Finding]:
    """One finding per optimizer whose parameters drifted apart between two ranks."""
    ranks = sorted(recs)
    base = recs[ranks[0]].get("optimizers") or []
    out: list[Finding] = []
    for o in base:
        worst: tuple[int, int, list[str], float, int, int] | None = None
        for r in ranks[1:]:
            other = next((x for x in recs[r].get("optimizers") or [] if x["index"] == o["index"]), None)
            if other is None or other["names"] != o["names"]:
                continue
            got = _judge(o, other)
            if got is not None and (worst is None or got[0] < worst[0]):
                worst = (*got, r)
        if worst is None:
            continue
        first, last, differ, gap, compared, r = worst
        line = o.get("line")
        label = o.get("label") or "model"
        evidence: dict[str, Any] = {
            "model": label, "ranks": [ranks[0], r], "identical_before_first_step": True,
            "first_step_differing": first, "last_step_compared": last, "steps_compared": compared,
            "parameters_differing_at_last_step": differ[:8], "count": len(differ), "parameters": len(o["names"]),
            "largest_relative_difference_of_parameter_norms": float(f"{gap:.3g}"),
            "optimizer_step_line": line}
        fields = {"model": label, "step": first, "last": last, "count": len(differ), "total": len(o["names"]),
                  "first": differ[0] if differ else o["names"][0], "a": ranks[0], "b": r,
                  "line": os.path.basename(line) if line else "-"}
        file, _, ln = (line or "").rpartition(":")
        frame = UserFrame(file, int(ln), "") if file and ln.isdigit() else None
        out.append(from_catalogue(Category.DISTRIBUTED, "distributed.replicas_drift", "ranks.replicas_drift",
                                  fields=fields, cause_key="ranks.replicas_drift.cause",
                                  next_key="ranks.replicas_drift.next", evidence=evidence,
                                  severity=Severity.WARNING, stage=Stage.OPTIMIZER, step=first,
                                  parameter=fields["first"], frame=frame, source_line=frame is not None))
    return out
