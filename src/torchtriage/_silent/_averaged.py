"""Averaged copies of a model (EMA, mean teacher, Polyak target nets, SWA) and their invariant.

A copy is found by what it is, not by its name: at the first optimizer step, before any
parameter moves, a tensor outside every optimizer that holds exactly a trainable parameter's
values in another storage (`copy.deepcopy(model)`, `[p.clone().detach() for p in params]`,
`AveragedModel`, a `register_buffer` shadow), reachable from the watched models or a local
variable of a frame on the stack. Every correct update of such a copy is a convex
combination taken toward the parameter (as it was before or after that step):

    s <- s + a (p - s),   0 < a <= 1      (EMA: a = 1 - decay; a hard target copy: a = 1)

* `silent.ema_diverges`: the copy moves, and on every update measured it moves away from the
  parameter (a < 0, e.g. `s + (1 - d)(s - p)`, a flipped sign) while its distance to the
  parameter grows; the harm is that distance, measured at the first and the last reading.
* `silent.ema_not_averaging`: the copy takes at least HALF_WAY of the way to the parameter at
  every update measured after the first `_cadence.FULL` steps (an EMA's warm-up, where
  `min(decay, (1 + k) / (10 + k))` still moves it fast, is over), moving at every reading of
  consecutive steps and never a whole copy: it averages over about two steps, it is the live
  weights (an EMA whose decay attribute is overwritten by the per-step weight). A share that is
  still falling from step `FULL // 2` on (by RAMP or more) is a decay still ramping up (YOLOv5's
  `decay * (1 - exp(-updates / tau))` with tau = 2000 updates moves the copy ~0.98 of the way at
  step 33, less at every update after): quiet; the overwritten decay sits at its value.
* `silent.ema_buffers_stale`: the copy is a module whose parameters are being averaged, but
  whose floating buffers (BatchNorm running statistics) never left their initial values while
  the source's moved, and the copy was run in eval mode so: it normalises with statistics no
  data produced. A copy whose buffers are averaged too (timm ModelEmaV2, `AveragedModel(...,
  use_buffers=True)`) or recomputed before it is evaluated (`swa_utils.update_bn`) is quiet,
  and so is a frozen teacher (its parameters never move).

Both name the update's line: the first in-place op on a copy (`mul_`, `add_`, `lerp_`,
`copy_`, `_foreach_*_`), seen by a pass-through TorchFunctionMode during one step.
Cost: one bounded walk from the stack's locals and the watched models at the first optimizer
step; on the steps the silent check samples, a few reductions per tracked pair and one host
read (at most MAX_ELEMENTS elements tracked).
"""

from __future__ import annotations

import sys
import types
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from .. import _cadence
from .._frames import (
    UserFrame,
    find_frame,
    in_user_file,
    is_our_file,
    released_locals,
    user_frame_from_stack,
    user_frame_of,
    user_stack_frame,
)
from .._modestack import push_mode, remove_mode
from .._transparent import our_hook
from ._emacalls import InlineWrites, UpdateCalls
from ._twins import structural_twins

MAX_ELEMENTS = 1 << 22  # elements of copies tracked (each kept twice more between two readings)
MAX_DEPTH = 6  # links walked from a frame's locals to a copy (loop -> ema -> shadow list -> tensor)
MAX_VISITS = 50_000
MAX_ITEMS = 4096  # items taken from one container
FIRST_READINGS = 6  # consecutive steps read at the start
MIN_UPDATES = 3  # updates measured before a verdict
MIN_GROWTH = 2.0  # a diverging copy's distance to the parameters grows at least this much
HALF_WAY = 0.4  # an update taking the copy this share of the way to the parameter: horizon <= 2.5 steps
FAST = 0.2  # ... and none less than this share (horizon <= 5 steps)
HARD_COPY = 0.99  # a copy taken whole (a target network's hard update), on purpose
MIN_LATE = 2  # updates measured after the first FULL steps (an EMA's warm-up) before that verdict
RAMP = 0.005  # a copy whose share still falls by this much from step FULL // 2 on: its decay is still ramping up


@dataclass
class Pair:
    shadow: weakref.ref[torch.Tensor]
    param: weakref.ref[torch.Tensor]
    name: str  # the parameter's name
    holder: str  # the copy's name: the path it was reached by (`ema.shadow_params[0]`, `ema.1.weight`)
    coeffs: list[float] = field(default_factory=list)  # a of each update that moved the copy
    dists: list[float] = field(default_factory=list)  # ||s - p|| at each reading
    at: list[int] = field(default_factory=list)  # the step of each update measured
    lows: list[float] = field(default_factory=list)  # the smaller of the two readings of a (before / after)
    norms: list[float] = field(default_factory=list)  # ||p|| at each reading
    still: int = 0  # readings of consecutive steps at which the copy did not move
    frame: UserFrame | None = None  # the update's line
    gaps: list[tuple[int, float, float]] = field(default_factory=list)  # (step, ||s - p||, ||p||) at every reading
    roots: tuple[Any, Any] = (None, None)  # weak references to the copy's model and the parameter's
    print0: list[float] = field(default_factory=list)  # the copy's `_fingerprint` at discovery
    start: float | None = None  # a copy paired by structure, not value: ||copy - model|| at discovery


@dataclass
class BufferPair:
    module: weakref.ref[nn.Module]  # the copy's module (a BatchNorm of the EMA model)
    path: str
    names: list[str]
    shadow: list[torch.Tensor]  # initial values of the copy's buffers
    source: list[torch.Tensor]  # initial values of the source's buffers
    source_module: weakref.ref[nn.Module]
    params: list[Pair]  # the pairs of the copy's own parameters (moved: averaged)


class _UpdateLines(TorchFunctionMode):
    """Pass-through: the user's line of the first in-place op on each tracked copy."""

    def __init__(self, pointers: dict[int, list[Pair]], calls: UpdateCalls | None = None) -> None:
        super().__init__()
        self.pointers = pointers
        self.calls = calls

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        __tracebackhide__ = True
        out = func(*args, **(kwargs or {}))
        try:
            name = getattr(func, "__name__", "")
            if args and name.endswith("_") and not name.endswith("__") and self.pointers:
                first = args[0]
                targets = first[:64] if isinstance(first, (list, tuple)) else [first]
                for t in targets:
                    if isinstance(t, torch.Tensor):
                        for pair in self.pointers.pop(t.data_ptr(), ()):
                            pair.frame = pair.frame or user_frame_from_stack(1)
                            if self.calls is not None and not self.calls.tried and pair.start is None:
                                shadow = pair.shadow()
                                self.calls.first_write(t if shadow is None else shadow, pair.holder)
        except Exception:  # our bookkeeping never breaks the user's op
            self.pointers = {}
        return out


class AveragedCopies:
    """Finds the averaged copies at the first optimizer step, then measures their updates."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.scanned = False
        self.pairs: list[Pair] = []
        self.buffers: list[BufferPair] = []
        self.previous: tuple[int, dict[torch.device, tuple[torch.Tensor, torch.Tensor]]] | None = None
        self.mode: _UpdateLines | None = None
        self.hooks: list[Any] = []
        self.stale: list[dict[str, Any]] = []
        self.where: dict[int, str] = {}  # id of a module or tensor -> the path it was reached by
        self.calls = UpdateCalls(session)  # the update's calls against the optimizer steps (`_emacalls`)
        self.inline = InlineWrites()  # the copy's writes between backward calls (`_emacalls`)
        # id of a module -> its outermost model; the outermost models (weak: a model the run drops,
        # a clone made per iteration, must be freed as without us)
        self.roots: dict[int, weakref.ref[nn.Module]] | None = None
        self.top_models: list[weakref.ref[nn.Module]] = []
        self.names: dict[int, str] = {}  # id of a copy's or a parameter's model -> its name
        self.used: dict[int, UserFrame | None] = {}  # id of a copy's model -> the line of its first call followed

    # ------------------------------------------------------------------ discovery
    def first_step(self) -> None:
        if self.scanned:
            return
        self.scanned = True
        self.calls.note_loop(user_stack_frame(1))
        trainable: dict[int, torch.Tensor] = {}
        excluded: set[int] = set()
        for opt in self.session.optimizers:
            for g in opt.param_groups:
                for p in g["params"]:
                    if _sharded(p):
                        return  # DTensor parameters (`fully_shard`): their copies are shards too, not followed
                    if isinstance(p, torch.Tensor) and p.requires_grad and p.is_floating_point():
                        trainable[id(p)] = p
                    excluded.add(id(p))
            for st in opt.state.values():
                excluded.update(id(v) for v in st.values() if isinstance(v, torch.Tensor))
        if not trainable:
            return
        excluded.update(id(p.grad) for p in trainable.values() if p.grad is not None)
        shapes = {(tuple(p.shape), p.dtype, p.device) for p in trainable.values()}
        owners: dict[int, tuple[nn.Module, str]] = {}
        running: set[int] = set()  # buffers of modules that train: running statistics, not copies
        candidates: list[torch.Tensor] = []
        self.where = {}
        roots = [(m, self.session.model_label(m) or "model") for m in self.session.models]
        for o, where in _reachable(roots):
            if isinstance(o, nn.Module):
                for n, m in o.named_modules():
                    self.where.setdefault(id(m), f"{where}.{n}" if n else where)
                for m in o.modules():
                    own = list(m.named_parameters(recurse=False))
                    for n, p in own:
                        owners[id(p)] = (m, n)
                    if own or hasattr(m, "track_running_stats"):
                        running.update(id(b) for _, b in m.named_buffers(recurse=False))
            elif id(o) not in excluded and o.is_floating_point() and not o.is_meta \
                    and (tuple(o.shape), o.dtype, o.device) in shapes:
                candidates.append(o)
                self.where.setdefault(id(o), where)
        candidates = [t for t in candidates if id(t) not in running]
        self._pair(trainable, candidates, owners)
        self._structural(excluded)

    def _structural(self, excluded: set[int]) -> None:
        """Watched models that are copies of a trained one by structure only (same class, same
        parameter names, shapes and dtypes; none of theirs in an optimizer, none paired by value):
        a target network built beside its model and never copied from it (`_targetcopy`)."""
        paired = {id(t) for p in self.pairs if (t := p.shadow()) is not None}
        budget = MAX_ELEMENTS - sum(t.numel() for p in self.pairs if (t := p.shadow()) is not None)
        names = self.session.param_index
        for copy, online in structural_twins(self._tops(), excluded, paired):
            theirs = dict(online.named_parameters())
            mine = list(copy.named_parameters())
            size = sum(t.numel() for _, t in mine)
            if size > budget:
                return
            budget -= size
            with torch.no_grad():
                start = float(torch.stack([(t.detach().double() - theirs[n].detach().double()).pow(2).sum()
                                           for n, t in mine]).sum().cpu()) ** 0.5
            roots = (self._root(copy, True), self._root(online, False))
            for n, t in mine:
                p = theirs[n]
                pair = Pair(weakref.ref(t), weakref.ref(p), names.name(p) or n, f"{self.names.get(id(copy), '?')}.{n}")
                pair.roots, pair.start = roots, start
                self.pairs.append(pair)

    def _pair(self, trainable: dict[int, torch.Tensor], candidates: list[torch.Tensor],
              owners: dict[int, tuple[nn.Module, str]]) -> None:
        if not candidates:
            return
        with torch.no_grad():
            params = list(trainable.values())
            prints = torch.stack([_fingerprint(t) for t in params + candidates]).tolist()
            by_print: dict[tuple[Any, ...], list[torch.Tensor]] = {}
            for p, fp in zip(params, prints):
                by_print.setdefault((tuple(p.shape), p.dtype, p.device, *fp), []).append(p)
            matched: list[tuple[torch.Tensor, torch.Tensor]] = []
            start_prints: dict[int, list[float]] = {}
            names = self.session.param_index
            for t, fp in zip(candidates, prints[len(params):]):
                same = by_print.get((tuple(t.shape), t.dtype, t.device, *fp), [])
                if len(same) > 1:  # (every BatchNorm's weight of a width is ones): by the path's tail
                    same = _by_path(self.where.get(id(t), ""), same, names)
                if len(same) == 1 and _storage(same[0]) != _storage(t):
                    matched.append((t, same[0]))
                    start_prints[id(t)] = fp
            if not matched:
                return
            equal = torch.stack([(t == p).all().cpu() for t, p in matched]).tolist()
        budget = MAX_ELEMENTS
        by_module: dict[int, Pair] = {}
        for (t, p), eq in zip(matched, equal):
            if not eq or t.numel() > budget:
                continue
            budget -= t.numel()
            owner = owners.get(id(t))
            holder = self.where.get(id(t), "tensor")
            if owner is not None:
                holder = self._module_path(owner[0]) + "." + owner[1]
            pair = Pair(weakref.ref(t), weakref.ref(p), names.name(p) or "?", holder)
            pair.print0 = start_prints[id(t)]
            if owner is not None and id(p) in owners:
                pair.roots = (self._root(owner[0], True), self._root(owners[id(p)][0], False))
            self.pairs.append(pair)
            self.inline.follow(t, holder)
            if owner is not None and id(p) in owners:
                src = owners[id(p)][0]
                if type(src) is type(owner[0]) and src is not owner[0]:
                    by_module.setdefault(id(owner[0]), pair)
                    self._buffers(owner[0], src, pair)

    def _tops(self) -> list[nn.Module]:
        """The outermost models: the watched ones and those the user's code on the stack names (a
        local, an attribute of one: `self.actor_target`, called through `.forward` and so never
        watched), none inside another; sets `roots` (id of a module -> its outermost model) and
        `names` (the user's name for each)."""
        if self.roots is None:
            named = _attr_names()
            tops = {id(m): m for m in self.session.models}
            tops.update((k, m) for k, (_, m) in named.items())
            inner = {id(s) for m in tops.values() for s in m.modules() if s is not m}
            top = [m for k, m in tops.items() if k not in inner]
            self.top_models = [weakref.ref(m) for m in top]
            self.roots = {id(s): weakref.ref(m) for m in top for s in m.modules()}
            for m in top:
                self.names[id(m)] = named[id(m)][0] if id(m) in named else \
                    self.session.model_label(m) or type(m).__name__
        return [m for r in self.top_models if (m := r()) is not None]

    def _root(self, module: nn.Module, follow: bool) -> weakref.ref[nn.Module]:
        """The outermost model holding `module` (`_tops`); a copy's first call is followed
        (`_targetcopy`: the line a copy is used at)."""
        self._tops()
        assert self.roots is not None
        ref = self.roots.get(id(module))
        found = ref() if ref is not None else None
        root = found if found is not None else module
        self.names.setdefault(id(root), type(root).__name__)
        if follow and id(root) not in self.used:
            self.used[id(root)] = None
            inside = {id(s) for s in root.modules()}
            first = next((s for s in root.modules() if s is not root and any(True for _ in s.parameters(False))), None)
            handles: list[Any] = []

            def pre(mod: nn.Module, args: Any) -> None:
                __tracebackhide__ = True
                if self.used.get(id(root)) is None:
                    f = find_frame(lambda f: in_user_file(f) and id(released_locals(f).get("self")) not in inside,
                                   sys._getframe(1))
                    self.used[id(root)] = user_frame_of(f) if f is not None else None
                for h in handles:
                    h.remove()
            for m in (root, first):
                if m is not None:
                    handles.append(m.register_forward_pre_hook(our_hook(pre)))
            self.hooks.extend(handles)
        return weakref.ref(root)

    def _buffers(self, copy: nn.Module, src: nn.Module, pair: Pair) -> None:
        for b in self.buffers:
            if b.module() is copy:
                b.params.append(pair)
                return
        theirs = dict(src.named_buffers(recurse=False))
        names, mine, source = [], [], []
        for n, buf in copy.named_buffers(recurse=False):
            other = theirs.get(n)
            if isinstance(other, torch.Tensor) and buf.is_floating_point() and other.shape == buf.shape:
                names.append(n)
                mine.append(buf.detach().clone())
                source.append(other.detach().clone())
        if not names:
            return
        path = self._module_path(copy)
        self.buffers.append(BufferPair(weakref.ref(copy), path, names, mine, source, weakref.ref(src), [pair]))
        def pre(module: nn.Module, args: Any) -> None:
            __tracebackhide__ = True
            self._copy_forward(module, args)

        self.hooks.append(copy.register_forward_pre_hook(our_hook(pre)))  # (left out of copies, pickles)

    def _module_path(self, module: nn.Module) -> str:
        """The module's path in its watched model, else the one it was reached by (`ema.module.1`)."""
        path = self.session.module_name(module)
        if path is not None:
            return path or type(module).__name__
        return self.where.get(id(module), type(module).__name__)

    # ------------------------------------------------------------------ readings
    def observe(self, step: int) -> None:
        """At a step's beginning (the previous step's update done); measures since the last reading
        when that was the step before."""
        if not self.pairs:
            return
        if FIRST_READINGS < step <= _cadence.FULL:
            self.drop_mode()
            return  # the first readings, then the sampled pairs of steps (k, k + 1)
        live = [(p.shadow(), p.param()) for p in self.pairs]
        if any(t is None or q is None for t, q in live):  # a copy (or its model) was dropped
            keep = [k for k, (t, q) in enumerate(live) if t is not None and q is not None]
            self.pairs, live, self.previous = [self.pairs[k] for k in keep], [live[k] for k in keep], None
            if not self.pairs:
                return
        groups: dict[torch.device, list[int]] = {}
        for k, (t, _) in enumerate(live):
            groups.setdefault(t.device, []).append(k)  # type: ignore[union-attr]
        prev = self.previous
        now: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        rows: list[tuple[list[int], torch.Tensor]] = []
        with torch.no_grad():
            for dev, idx in groups.items():
                pairs = [live[k] for k in idx]
                sh = torch.cat([t.detach().reshape(-1).double() for t, _ in pairs])  # type: ignore[union-attr]
                pa = torch.cat([q.detach().reshape(-1).to(dev).double() for _, q in pairs])  # type: ignore[union-attr]
                now[dev] = (sh, pa)
                if prev is None or prev[0] != step - 1 or dev not in prev[1]:
                    continue
                s0, p0 = prev[1][dev]
                seg = torch.repeat_interleave(torch.arange(len(idx), device=dev),
                                              torch.tensor([t.numel() for t, _ in pairs], device=dev))  # type: ignore[union-attr]
                ds, d_before, d_after = sh - s0, p0 - s0, pa - s0
                sums = torch.zeros(len(idx), 6, dtype=torch.float64, device=dev)
                sums.index_add_(0, seg, torch.stack([ds * d_before, d_before * d_before, ds * d_after,
                                                     d_after * d_after, (sh - pa) ** 2, pa * pa], 1))
                moved = torch.zeros(len(idx), dtype=torch.float64, device=dev)
                moved.scatter_reduce_(0, seg, ds.abs(), "amax")
                rows.append((idx, torch.cat([moved[:, None], sums], 1)))
            for idx, stats in rows:
                for k, row in zip(idx, stats.cpu().tolist()):
                    moved_by, n1, q1, n2, q2, dist2, norm2 = row
                    pair = self.pairs[k]
                    pair.gaps.append((step, dist2 ** 0.5, norm2 ** 0.5))
                    if moved_by > 0 and (q1 > 0 or q2 > 0):
                        pair.coeffs.append(max(n1 / q1 if q1 > 0 else -1e30, n2 / q2 if q2 > 0 else -1e30))
                        pair.dists.append(dist2 ** 0.5)
                        pair.norms.append(norm2 ** 0.5)
                        pair.at.append(step)
                        pair.lows.append(min(n1 / q1 if q1 > 0 else 1e30, n2 / q2 if q2 > 0 else 1e30))
                    else:
                        pair.still += 1
            self.previous = (step, now)
        if self.mode is None and any(p.frame is None for p in self.pairs):
            pointers: dict[int, list[Pair]] = {}
            for pair, (s, _) in zip(self.pairs, live):
                if s is not None:
                    pointers.setdefault(s.data_ptr(), []).append(pair)
            self.mode = _UpdateLines(pointers, self.calls)
            push_mode(self.mode)
        elif self.mode is not None:
            self.drop_mode()

    def mark(self, step: bool) -> None:
        """A backward call (or, `step`, an optimizer step) of a step the check takes part in."""
        if self.pairs:
            self.inline.mark(step)

    def gap(self) -> None:
        self.inline.gap()

    def drop_mode(self) -> None:
        if self.mode is not None:
            remove_mode(self.mode)
            self.mode.pointers = {}

    def _copy_forward(self, module: nn.Module, args: Any) -> None:
        if module.training:
            return
        try:
            for b in self.buffers:
                if b.module() is not module:
                    continue
                src = b.source_module()
                if src is None or not any(len(p.coeffs) for p in b.params):
                    return  # its parameters did not move (yet): a frozen copy, not an average
                mine = dict(module.named_buffers(recurse=False))
                theirs = dict(src.named_buffers(recurse=False))
                with torch.no_grad():
                    kept = [torch.equal(mine[n], init) for n, init in zip(b.names, b.shadow)]
                    moved = [not torch.equal(theirs[n], init) for n, init in zip(b.names, b.source)]
                if not all(kept):
                    self.buffers.remove(b)  # the copy's statistics are maintained
                elif any(moved):
                    n = b.names[moved.index(True)]
                    self.stale.append({"module": b.path, "buffers": b.names, "example": n,
                                       "copy_value": _mean(mine[n]), "source_value": _mean(theirs[n]),
                                       "pair": b.params[0], "frame": user_frame_from_stack(1)})
                    self.buffers.remove(b)
                return
        except Exception as e:  # our bug: the user's forward goes on
            self.buffers.clear()
            self.session.internal_error("silent.averaged_copies", e)

    def close(self) -> None:
        self.drop_mode()
        self.calls.close()
        for h in self.hooks:
            h.remove()
        self.hooks.clear()

    # ------------------------------------------------------------------ verdicts
    def diverging(self) -> list[Pair]:
        """Copies that moved away from their parameter on every update measured, farther and farther."""
        out = []
        for p in self.valued():
            if len(p.coeffs) >= MIN_UPDATES and max(p.coeffs) < 0 and p.dists[0] > 0 \
                    and p.dists[-1] >= MIN_GROWTH * p.dists[0]:
                out.append(p)
        return out

    def not_averaging(self) -> list[Pair]:
        """Copies that, on the pairs of consecutive steps measured after the first FULL, moved at
        least HALF_WAY of the way to their parameter (the median; FAST at least), moved at every
        such reading and were no hard copy: an average over about
        two steps, the live weights (`self.decay = 1 - decay` stored back each step)"""
        out = []
        for p in self.valued():
            late = [c for c, s in zip(p.lows, p.at) if s > _cadence.FULL]
            settled = [c for c, s in zip(p.lows, p.at) if s >= _cadence.FULL // 2]
            ramping = bool(settled) and settled[-1] < (1 - RAMP) * settled[0]
            if (len(late) >= MIN_LATE and p.still == 0 and sorted(late)[len(late) // 2] >= HALF_WAY
                    and min(late) >= FAST and max(late) < HARD_COPY and not ramping):
                out.append(p)
        return out

    def updated(self) -> list[Pair]:
        return [p for p in self.valued() if len(p.coeffs) >= MIN_UPDATES]

    def unchanged(self, pairs: list[Pair]) -> bool:
        """Every copy of `pairs` still holds the values it had at discovery (its fingerprint: one
        host read at the end of the run); a copy updated between two readings has moved."""
        shadows = [p.shadow() for p in pairs]
        if not pairs or any(t is None for t in shadows):
            return False
        with torch.no_grad():
            now = torch.stack([_fingerprint(t) for t in shadows if t is not None]).tolist()
        return all(p.print0 == fp for p, fp in zip(pairs, now))

    def valued(self) -> list[Pair]:
        """The copies paired by value (the EMA verdicts' own); those paired by structure only are
        `_targetcopy`'s."""
        return [p for p in self.pairs if p.start is None]


def _reachable(roots: list[tuple[nn.Module, str]]) -> list[tuple[Any, str]]:
    """Modules and tensors reachable from the watched models and the locals of the frames on the
    stack (the training loop's `ema`, `model_ema`, `teacher`, a trainer's callbacks), with the
    path they were reached by (`ema.shadow_params[3]`), walked breadth-first through
    attributes, containers and modules, at most MAX_DEPTH links and MAX_VISITS objects;
    torchtriage's own objects are not entered."""
    seen: set[int] = set()
    out: list[tuple[Any, str]] = []
    level: list[tuple[Any, str]] = list(roots)
    f: Any = sys._getframe(1)
    while f is not None:
        if not is_our_file(f.f_code.co_filename):
            level.extend((v, k) for k, v in f.f_locals.items())
        f = f.f_back
    for _ in range(MAX_DEPTH):
        nxt: list[tuple[Any, str]] = []
        for o, where in level:
            if id(o) in seen or len(seen) >= MAX_VISITS:
                continue
            seen.add(id(o))
            if isinstance(o, torch.Tensor):
                out.append((o, where))
            elif isinstance(o, nn.Module):
                out.append((o, where))
                tensors: list[tuple[torch.Tensor, str]] = [(t, f"{where}.{n}") for n, t in o.named_parameters()]
                tensors += [(t, f"{where}.{n}") for n, t in o.named_buffers()]
                out.extend(tensors)
                seen.update(id(t) for t, _ in tensors)
                for n, m in o.named_modules():
                    seen.add(id(m))
                    at = f"{where}.{n}" if n else where
                    nxt.extend((v, f"{at}.{k}") for k, v in vars(m).items() if k not in _MODULE_STATE)
            elif isinstance(o, (list, tuple)):
                nxt.extend((v, f"{where}[{k}]") for k, v in enumerate(o[:MAX_ITEMS]))
            elif isinstance(o, dict):
                nxt.extend((v, f"{where}[{k!r}]") for k, v in list(o.items())[:MAX_ITEMS])
            elif not isinstance(o, _LEAVES) and not type(o).__module__.startswith(_OURS):
                d = getattr(o, "__dict__", None)
                if isinstance(d, dict) and not isinstance(o, type):
                    nxt.extend((v, f"{where}.{k}") for k, v in list(d.items())[:MAX_ITEMS])
        level = nxt
    return out


_MODULE_STATE = ("_parameters", "_buffers", "_modules", "_forward_hooks", "_forward_pre_hooks",
                 "_backward_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks")
_LEAVES = (str, bytes, int, float, bool, complex, type(None), types.ModuleType, types.FunctionType,
           types.BuiltinFunctionType, types.MethodType, type)
_OURS = __name__.split(".")[0] + "."


def _attr_names() -> dict[int, tuple[str, nn.Module]]:
    """id of a module -> the user's name for it on the stack and the module: a local (`target_net`)
    or an attribute of one (`self.target_actor`, `agent.critic_target`), innermost frame first."""
    out: dict[int, tuple[str, nn.Module]] = {}
    f: Any = sys._getframe(1)
    while f is not None:
        if in_user_file(f):
            for k, v in list(released_locals(f).items()):
                if isinstance(v, nn.Module):
                    out.setdefault(id(v), (k, v))
                elif not isinstance(v, _LEAVES) and isinstance(d := getattr(v, "__dict__", None), dict):
                    for a, m in list(d.items())[:MAX_ITEMS]:
                        if isinstance(m, nn.Module):
                            out.setdefault(id(m), (f"{k}.{a}", m))
        f = f.f_back
    return out


def _by_path(path: str, params: list[torch.Tensor], names: Any) -> list[torch.Tensor]:
    """The one parameter whose name shares the longest tail with the copy's path (`ema.4.weight`
    and `4.weight`; `backbone_ema.net.1.weight` and `backbone.net.1.weight`), at least its
    last two components; else none (ambiguous)."""
    mine = path.split(".")
    scored = []
    for p in params:
        theirs = (names.name(p) or "").split(".")
        n = 0
        while n < min(len(mine), len(theirs)) and mine[-1 - n] == theirs[-1 - n]:
            n += 1
        scored.append((n, p))
    best = max(n for n, _ in scored) if scored else 0
    top = [p for n, p in scored if n == best]
    return top if best >= 2 and len(top) == 1 else []


def _fingerprint(t: torch.Tensor) -> torch.Tensor:
    x = t.detach().double().flatten()
    w = torch.arange(1, x.numel() + 1, dtype=torch.float64, device=x.device)
    return torch.stack([x.sum(), (x * w).sum(), x.abs().max() if x.numel() else x.sum()]).cpu()


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _mean(t: torch.Tensor) -> float:
    return round(float(t.double().mean()), 6)


def _sharded(t: Any) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch built without distributed
        return False
    return isinstance(t, DTensor)
