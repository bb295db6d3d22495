"""Ranks agree (issue 26): the replicas of a DDP model are identical after every step, the
synced gradient is the ranks' mean, and a sharded (`fully_shard`) parameter gets a gradient.

Each rank keeps, at the sampled steps, one number per parameter of each DDP model after the
optimizer step (its L1 norm, on the device; read once, at the end), and at a few sampled
optimizer steps the signed sum of every parameter's gradient twice: as this rank's backward made
it (a tensor hook: the local gradient) and as the optimizer reads it (after the ranks' sync).
A sum is linear: the synced gradient's sum is the mean of the ranks' local sums when the sync
averages, and `world_size ×` that mean when it sums without dividing. Everything goes to rank 0
with the rank's report (its meta, `step_ranks`); the merge compares the ranks
(`compare_records`): the first recorded step whose numbers differ and the parameters that differ,
with the causes this rank saw: a parameter whose dtype or device changed after the model was
wrapped, a call of the wrapped module that bypassed the wrapper (`model.module(x)` in grad mode:
no gradient sync for that backward).

A `fully_shard` parameter (a DTensor) whose `.grad` is None at every judged optimizer step
although the optimizer stepped is reported on its rank (the gradient check sits out FSDP).

Cost, only in a process that is one rank of several: one hook call per parameter and backward
(a flag test off the sampled steps), one `_foreach_norm` per sampled step, a few sums at
`MAX_SYNC` optimizer steps; no device read before the end.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch
import torch.nn as nn

from .._distributed._ddp import is_ddp
from .._distributed._env import rank_info
from .._distributed._merge import RECORD_CHECKS
from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack
from .._transparent import our_hook
from ._normalizer import GlobalDivisor
from ._replicas import OptimizerPrints, compare_optimizers

KEEP = 48  # recorded steps (thinned by half past it, the first 16 kept)
MAX_SYNC = 4  # optimizer steps whose local and synced gradient sums are recorded
CANCELLED = 1e-4  # a sum under this share of the summed magnitudes is cancellation, not signal
MIN_STEPS = 3
RTOL = 1e-6


def _at(frame: UserFrame | None) -> str | None:
    return f"{frame.file}:{frame.line}" if frame is not None else None


def _dtensor(t: torch.Tensor) -> bool:
    return isinstance(getattr(t, "_local_tensor", None), torch.Tensor)


class _Wrapped:
    """One DDP model: its inner parameters, their dtype and device when first seen, the hooks."""

    def __init__(self, ddp: nn.Module, label: str, owner: RankWatch, armed: bool = False) -> None:
        inner = ddp.module
        assert isinstance(inner, nn.Module)
        self.label = label
        named = [(n, p) for n, p in inner.named_parameters() if p.is_floating_point() and not _dtensor(p)]
        self.names = [n for n, _ in named]
        self.params: list[weakref.ref[torch.Tensor]] = [weakref.ref(p) for _, p in named]
        self.kinds = [(p.dtype, p.device) for _, p in named]
        self.inside = 0
        self.called = False  # a grad-mode forward went through the wrapper since the last backward
        # the wrapper's own hooks ran once (a model found in its first call); hooked when it was
        # built: from the start, so that a wrapper never called at all shows its bypass
        self.armed = armed
        self.bypass: dict[str, Any] | None = None
        self.casts: list[str] = []
        self.cast_line: str | None = None
        self.modules = (weakref.ref(ddp), weakref.ref(inner))

        def enter(module: nn.Module, args: Any) -> None:
            self.inside += 1
            self.armed = True
            if torch.is_grad_enabled():
                self.called = True

        def leave(module: nn.Module, args: Any, output: Any) -> None:
            self.inside = max(0, self.inside - 1)

        def inner_call(module: nn.Module, args: Any) -> None:
            if self.inside or not self.armed or not torch.is_grad_enabled() or not module.training:
                return
            if self.bypass is None:
                frame = user_frame_from_stack(2)
                self.bypass = {"line": _at(frame), "step": owner.session.step, "calls": 0}
            self.bypass["calls"] += 1

        self.handles = [ddp.register_forward_pre_hook(our_hook(enter)),
                        ddp.register_forward_hook(our_hook(leave), always_call=True),
                        inner.register_forward_pre_hook(our_hook(inner_call))]

    def live(self) -> list[torch.Tensor] | None:
        out = [p for r in self.params if (p := r()) is not None]
        return out if len(out) == len(self.params) else None

    def check_kinds(self, params: list[torch.Tensor], step: int) -> None:
        for i, p in enumerate(params):
            dtype, device = self.kinds[i]
            if (p.dtype, p.device) == (dtype, device) or any(c.startswith(self.names[i] + ":") for c in self.casts):
                continue
            was, now = str(dtype).replace("torch.", ""), str(p.dtype).replace("torch.", "")
            self.casts.append(f"{self.names[i]}: {was} on {device} -> {now} on {p.device} (seen at step {step})")

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()


class RankWatch:
    def __init__(self, session: Any) -> None:
        self.session = session
        info = rank_info()
        self.world = info.world_size if info is not None else 1
        self.on = self.world >= 2
        self.models: list[_Wrapped] = []
        self.prints: list[tuple[int, int, torch.Tensor]] = []  # (model index, step, norms)
        self.local: dict[int, torch.Tensor] = {}  # id(param) -> this rank's gradient [sum, sum of magnitudes]
        self.sync: list[dict[str, Any]] = []
        self.sync_pending: list[tuple[int, list[str], torch.Tensor, torch.Tensor]] = []
        self._hooks: list[Any] = []
        self._hooked: set[int] = set()
        self._wrapped: set[int] = set()
        self._sampling = False
        self.shards: dict[int, list[Any]] = {}  # id(param) -> [ref, none count, judged steps]
        self.replicas = OptimizerPrints(session)
        self._sampled = False
        self.divisor = GlobalDivisor(session, self.world)
        if self.on:
            self._watch_wrapping()
            self.divisor.install()

    # ------------------------------------------------------------------ events
    def _watch_wrapping(self) -> None:
        """DistributedDataParallel built while the session runs: watched from its construction,
        also when the session never sees it called (its wrapped module called instead)."""
        cls = torch.nn.parallel.DistributedDataParallel
        original = cls.__init__
        watch = self

        def __init__(ddp: Any, *args: Any, **kwargs: Any) -> None:
            original(ddp, *args, **kwargs)
            try:
                inner = getattr(ddp, "module", None)
                if isinstance(inner, nn.Module):
                    watch._add_wrapped(ddp, type(inner).__name__, armed=True)
            except Exception as e:
                watch.session.internal_error("step ledger, ranks", e)

        self.session.patch(cls, "__init__", __init__)

    def _add_wrapped(self, model: nn.Module, label: str, armed: bool = False) -> None:
        if id(model) in self._wrapped:
            for w in self.models:
                if w.modules[0]() is model:
                    w.label = label
            return
        self._wrapped.add(id(model))
        self.models.append(_Wrapped(model, label, self, armed=armed))
        if len(self.models) == 1:
            self.session.patch(nn.Module, "_apply", self._wrap_apply(nn.Module._apply))

    def model(self, model: nn.Module, label: str) -> None:
        if not self.on:
            return
        if is_ddp(model):
            self._add_wrapped(model, label)
        for p in model.parameters():
            if p.requires_grad and p.is_floating_point() and not _dtensor(p) and id(p) not in self._hooked:
                self._hooked.add(id(p))
                self._hooks.append(p.register_hook(self._local_hook(p)))

    def _wrap_apply(self, original: Any) -> Any:
        """`Module._apply` (what .to / .half / .double / .cuda run): the line that casts or moves a
        wrapped model, kept as the cause's line should its parameters change."""
        watch = self

        def _apply(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            for w in watch.models:
                if w.cast_line is None and any(r() is module for r in w.modules):
                    try:
                        w.cast_line = _at(user_frame_from_stack(2))
                    except Exception:
                        pass
            return original(module, *args, **kwargs)

        return _apply

    def _local_hook(self, p: torch.Tensor) -> Any:
        pid = id(p)
        watch = self

        def hook(grad: torch.Tensor) -> None:
            if watch._sampling and grad.layout is torch.strided:
                g = grad.detach()
                # the sum (linear: a sync's sum of the ranks' sums) and the sum of magnitudes
                # (how much a sum near 0 cancelled: a softmax head's weight gradient sums to 0)
                s = torch.stack([g.sum(dtype=torch.float64), g.abs().sum(dtype=torch.float64)])
                have = watch.local.get(pid)
                watch.local[pid] = s if have is None else have + s

        return hook

    def backward(self, roots: tuple[torch.Tensor, ...]) -> None:
        if self.on:
            # DDP averages the gradients of a backward through the wrapper's forward
            self.divisor.backward(roots, any(w.called for w in self.models))
            for w in self.models:
                w.called = False

    def step_begin(self, sampled: bool) -> None:
        self._sampled = self.on and sampled
        self._sampling = self.on and sampled and len(self.sync) + len(self.sync_pending) < MAX_SYNC
        if not self._sampling:
            self.local.clear()

    def optimizer_step(self, opt: torch.optim.Optimizer) -> None:
        if not self.on:
            return
        self._shards(opt)
        if self._sampled:
            self.replicas.pre_step(opt, self.session.step)
        if not self._sampling or not self.local:
            return
        names, local, synced = [], [], []
        index = self.session.param_index
        for g in opt.param_groups:
            for p in g["params"]:
                s = self.local.get(id(p))
                if s is None or p.grad is None or _dtensor(p):
                    continue
                names.append(index.name(p) or "?")
                local.append(s)
                synced.append(p.grad.detach().sum(dtype=torch.float64))
        self.local.clear()
        if names:
            self.sync_pending.append((self.session.step, names, torch.stack(local), torch.stack(synced)))

    def step_end(self, step: int) -> None:
        self.local.clear()
        self._sampling = False
        if not self.on:
            return
        for i, w in enumerate(self.models):
            params = w.live()
            if not params:
                continue
            w.check_kinds(params, step)
            with torch.no_grad():
                try:
                    norms = torch.stack([n.double() for n in torch._foreach_norm([p.detach() for p in params], 1)])
                except Exception:
                    norms = torch.stack([p.detach().double().abs().sum() for p in params])
            self.prints.append((i, step, norms))
        if len(self.prints) > KEEP * max(1, len(self.models)):
            head, tail = self.prints[:16], self.prints[16:]
            self.prints = head + tail[1::2]

    def _shards(self, opt: torch.optim.Optimizer) -> None:
        for g in opt.param_groups:
            for p in g["params"]:
                if not _dtensor(p) or not p.requires_grad:
                    continue
                entry = self.shards.setdefault(id(p), [weakref.ref(p), 0, 0])
                entry[1] += p.grad is None
                entry[2] += 1

    # ------------------------------------------------------------------ the end
    def end(self) -> list[Finding]:
        """This rank's record into the session's meta; the sharded-parameter finding."""
        for w in self.models:
            w.remove()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        if not self.on:
            return []
        out = self._none_grads()
        if self.divisor.found is not None:
            out.append(self.divisor.found)
        rec: dict[str, Any] = {"world_size": self.world, "models": [], "sync": []}
        for i, w in enumerate(self.models):
            steps = [(s, n) for j, s, n in self.prints if j == i]
            rec["models"].append({"label": w.label, "names": w.names, "steps": [s for s, _ in steps],
                                  "prints": [n.cpu().tolist() for _, n in steps], "casts": w.casts,
                                  "cast_line": w.cast_line if w.casts else None,
                                  "bypass": w.bypass})
        for step, names, local, synced in self.sync_pending:
            both = local.cpu()
            rec["sync"].append({"step": step, "names": names, "local": both[:, 0].tolist(),
                                "scale": both[:, 1].tolist(), "synced": synced.cpu().tolist()})
        self.sync_pending.clear()
        rec["optimizers"] = self.replicas.record()
        if rec["models"] or rec["sync"] or rec["optimizers"]:
            self.session.meta["step_ranks"] = rec
        return out

    def _none_grads(self) -> list[Finding]:
        index = self.session.param_index
        never = [p for ref, none, seen in self.shards.values() if seen >= MIN_STEPS and none == seen
                 and (p := ref()) is not None]
        if not never:
            return []
        names = [index.name(p) or "?" for p in never]
        info = index.info(never[0])
        steps = max(seen for _, _, seen in self.shards.values())
        fields = {"count": len(names), "first": names[0], "steps": steps}
        evidence = {"parameters": names[:8], "count": len(names), "grad": "None at every judged step",
                    "judged_optimizer_steps": steps, "parameter_type": "DTensor (fully_shard)"}
        if info is not None and info.label:
            evidence["model"] = info.label
        return [from_catalogue(Category.GRADIENT, "gradient.sharded_no_grad", "ledger.sharded_no_grad",
                               fields=fields, cause_key="ledger.sharded_no_grad.cause",
                               next_key="ledger.sharded_no_grad.next", evidence=evidence, severity=Severity.WARNING,
                               stage=Stage.BACKWARD, step=self.session.step,
                               module=info.module if info is not None else None, parameter=names[0])]


# ---------------------------------------------------------------------- on rank 0, at the merge
def compare_records(records: dict[int, dict[str, Any]]) -> list[Finding]:
    recs = {r: rec.get("report", {}).get("meta", {}).get("step_ranks") for r, rec in records.items()}
    recs = {r: v for r, v in recs.items() if v}
    if len(recs) < 2:
        return []
    try:
        for rec in recs.values():  # the records went through JSON: a non-finite number is a string
            for m in rec.get("models", []):
                m["prints"] = [[_real(v) for v in row] for row in m.get("prints", [])]
            for sync in rec.get("sync", []):
                sync["local"], sync["synced"] = [_real(v) for v in sync["local"]], [_real(v) for v in sync["synced"]]
            for o in rec.get("optimizers") or []:
                o["prints"] = [[_real(v) for v in row] for row in o.get("prints", [])]
        drift = _drift(recs)
        found = [f for f in (drift, _summed(recs)) if f is not None]
        # replicas of a DDP model found drifting: their optimizer's drift is the same fault
        return found if drift is not None else found + compare_optimizers(recs)
    except Exception as e:  # our own bug: a warning, never the merged report lost
        import warnings

        from .._errors import TriageInternalWarning
        warnings.warn(TriageInternalWarning(f"step ledger, ranks: {type(e).__name__}: {e}"), stacklevel=1)
        return []


def _drift(recs: dict[int, dict[str, Any]]) -> Finding | None:
    ranks = sorted(recs)
    base = recs[ranks[0]]
    for mi, m in enumerate(base["models"]):
        first: tuple[int, int, list[str]] | None = None  # (step, rank, names)
        for r in ranks[1:]:
            others = recs[r]["models"]
            if mi >= len(others) or others[mi]["names"] != m["names"]:
                continue
            o = others[mi]
            theirs = dict(zip(o["steps"], o["prints"]))
            for step, mine in zip(m["steps"], m["prints"]):
                other = theirs.get(step)
                if other is None:
                    continue
                differ = [n for n, a, b in zip(m["names"], mine, other)
                          if not math.isclose(a, b, rel_tol=RTOL, abs_tol=1e-12) and not (a != a and b != b)]
                if differ:
                    if first is None or step < first[0]:
                        first = (step, r, differ)
                    break
        if first is None:
            continue
        step, r, differ = first
        cast_ranks = [q for q in ranks if mi < len(recs[q]["models"]) and recs[q]["models"][mi]["casts"]]
        casts = [f"rank {cast_ranks[0]}: {c}" for c in recs[cast_ranks[0]]["models"][mi]["casts"]] \
            if cast_ranks else []
        bypass = {q: recs[q]["models"][mi]["bypass"] for q in ranks
                  if mi < len(recs[q]["models"]) and recs[q]["models"][mi]["bypass"]}
        evidence: dict[str, Any] = {"model": m["label"], "first_step_differing": step, "ranks": [ranks[0], r],
                                    "parameters_differing": differ[:8], "count": len(differ),
                                    "parameters": len(m["names"]), "steps_compared_before": sum(
                                        1 for s in m["steps"] if s < step)}
        cause, line = "ledger.ranks_drift.cause", None
        if casts:
            cause = "ledger.ranks_drift.cause.cast"
            evidence["changed_after_wrapping"] = casts[:8]
            evidence["ranks_that_changed_them"] = cast_ranks
            line = recs[cast_ranks[0]]["models"][mi].get("cast_line")
            if line:
                evidence["cast_line"] = line
        elif bypass:
            cause = "ledger.ranks_drift.cause.bypass"
            q, b = min(bypass.items())
            evidence["bypassed_wrapper"] = {f"rank {k}": v for k, v in sorted(bypass.items())}
            line = b.get("line")
        fields = {"model": m["label"], "step": step, "count": len(differ), "first": differ[0],
                  "a": ranks[0], "b": r, "casts": "; ".join(casts[:3]),
                  "line": line or "-"}
        file, _, ln = (line or "").rpartition(":")
        frame = UserFrame(file, int(ln), "") if file and ln.isdigit() else None
        return from_catalogue(Category.DISTRIBUTED, "distributed.ranks_drift", "ledger.ranks_drift", fields=fields,
                              cause_key=cause, next_key=cause.replace(".cause", ".next"), evidence=evidence,
                              severity=Severity.ERROR, stage=Stage.OPTIMIZER, step=step, parameter=differ[0],
                              frame=frame, source_line=frame is not None)
    return None


def _summed(recs: dict[int, dict[str, Any]]) -> Finding | None:
    ranks = sorted(recs)
    world = int(recs[ranks[0]].get("world_size") or len(ranks))
    if len(ranks) != world:
        return None
    for entry in recs[ranks[0]]["sync"]:
        step, names = entry["step"], entry["names"]
        others = [next((e for e in recs[r]["sync"] if e["step"] == step and e["names"] == names), None)
                  for r in ranks]
        if any(o is None for o in others):
            continue
        ratios, kept = [], []
        for i, name in enumerate(names):
            mean = sum(o["local"][i] for o in others) / world  # type: ignore[index]
            synced = entry["synced"][i]
            spread = max(abs(o["local"][i] - mean) for o in others)  # type: ignore[index]
            scale = max(o.get("scale", [0.0] * len(names))[i] for o in others)  # type: ignore[union-attr]
            if abs(mean) < max(1e-8, CANCELLED * scale) or spread < 1e-6 * abs(mean) or not math.isfinite(synced):
                # ranks that agree already, or a sum that cancelled to rounding noise (a softmax
                # head's gradient sums to 0 over the classes): the ratio says nothing
                continue
            ratios.append(synced / mean)
            kept.append(name)
        if len(ratios) < 1:
            continue
        near = [n for n, q in zip(kept, ratios) if abs(q - world) <= 0.02 * world]
        if len(near) * 2 <= len(ratios):
            return None
        evidence = {"step": step, "world_size": world, "parameters": near[:8], "count": len(near),
                    "synced_over_ranks_mean": [round(q, 4) for q in ratios[:8]],
                    "parameters_compared": len(ratios)}
        fields = {"step": step, "world": world, "count": len(near), "first": near[0],
                  "ratio": f"{ratios[kept.index(near[0])]:.3g}"}
        return from_catalogue(Category.DISTRIBUTED, "distributed.grad_summed", "ledger.grad_summed", fields=fields,
                              cause_key="ledger.grad_summed.cause", next_key="ledger.grad_summed.next",
                              evidence=evidence, severity=Severity.WARNING, stage=Stage.BACKWARD, step=step,
                              parameter=near[0])
    return None


RECORD_CHECKS.append(compare_records)  # the merged report of a distributed run compares the ranks' steps


def _real(v: Any) -> float:
    """A number of a record: "nan" / "inf" (as JSON wrote them) back to floats."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan
