"""A training step after the batch loop: every batch a training loop loads must reach a backward
that reaches an optimizer step.

The shape of the bug: the forward / backward / `optimizer.step()` block dedented out of
`for batch in loader:`. The loop then only unpacks each batch (no training forward, no backward,
no step while the pass runs), the sampler runs out, and one step follows, on the last batch's
tensors, which the loop variable still holds. The data ledger sees such a pass as an evaluation
pass (no batch reached a backward before the next one was asked for), so its coverage verdict
never judges it.

Measured: per pass of a loader, whether any training forward, backward or optimizer step ran
between its first batch and the sampler's end; for a pass with none and at least two batches,
the work that follows the end until another batch of any loader is asked for: the first training
forward's inputs compared with the last batch's tensors (the same tensor, or equal shape, dtype
and values: a `.to(device)` copy), then the backward calls and optimizer steps. A pass whose last
batch alone fed the step(s) that followed it (fewer backwards than batches) is an occurrence; a
loop that collects the batches and trains on each afterwards runs as many backwards as batches
(quiet), a statistics pass followed by training on other data feeds no forward with the last
batch (quiet). At the end, two or more occurrences make `data.coverage_lost` (variant
`after_loop`): the samples the passes loaded against those that reached a step are the harm; a
warning when the step saw less than half of them.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING, Any

import torch

from .._frames import UserFrame, user_frame_from_stack
from .._loaderstream import tensors as batch_tensors
from ._make import finding

if TYPE_CHECKING:
    from ._checker import DataLedger

MIN_PASSES = 2
MIN_BATCHES = 2
MOST_KEPT = 64  # occurrences kept


@dataclasses.dataclass(eq=False)
class _Pass:
    loader: str
    frame: UserFrame | None  # the loop's line (the first batch's request)
    mark: tuple[int, int, int]  # (training forwards, backwards, steps) at the first batch
    sizes: list[int] = dataclasses.field(default_factory=list)
    last: list[weakref.ref[torch.Tensor]] = dataclasses.field(default_factory=list)
    idle: bool = True


@dataclasses.dataclass(eq=False)
class _After:
    p: _Pass
    mark: tuple[int, int, int]  # the counters at the sampler's end
    fed: bool | None = None  # the first training forward read the last batch
    step_frame: UserFrame | None = None


class AfterLoop:
    """A listener of the loader stream and of the ledger's training events."""

    def __init__(self, ledger: DataLedger) -> None:
        self.ledger = ledger
        self.steps = 0
        self.passes: weakref.WeakKeyDictionary[Any, _Pass] = weakref.WeakKeyDictionary()
        self.after: _After | None = None
        self.found: list[dict[str, Any]] = []
        self.frame: UserFrame | None = None
        self.step_frame: UserFrame | None = None
        self.names: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def counters(self) -> tuple[int, int, int]:
        return self.ledger.forwards, self.ledger.backwards, self.steps

    # ------------------------------------------------------------------ loader stream
    def on_begin(self, it: Any, loader: Any) -> None:
        self._close()
        try:
            self.names[it] = type(loader).__name__
        except TypeError:
            pass

    def on_batch(self, it: Any, indices: Any, data: Any) -> None:
        self._close()
        try:
            p = self.passes.get(it)
        except TypeError:
            return
        now = self.counters()
        tensors = batch_tensors(data)
        if p is None:
            followed = self.ledger.follower.passes.get(it)  # (the ledger's name for this loader)
            name = followed.loader.name if followed is not None else self.names.get(it, "DataLoader")
            p = _Pass(name, user_frame_from_stack(1), now)
            try:
                self.passes[it] = p
            except TypeError:
                return
        elif p.idle and now != p.mark:
            p.idle = False
        if p.idle:
            p.sizes.append(len(tensors[0]) if tensors and tensors[0].dim() else 1)
            p.last = [weakref.ref(t) for t in tensors[:4]]

    def on_stop(self, it: Any) -> None:
        self._close()
        try:
            p = self.passes.pop(it, None)
        except TypeError:
            return
        if p is None or not p.idle or len(p.sizes) < MIN_BATCHES or self.counters() != p.mark:
            return
        self.after = _After(p, self.counters())

    # ------------------------------------------------------------------ training events
    def on_forward(self, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        a = self.after
        if a is None or a.fed is not None:
            return
        if not (getattr(model, "training", False) and torch.is_grad_enabled()):
            return
        last = [t for r in a.p.last if (t := r()) is not None]
        given = batch_tensors(list(args) + list(kwargs.values()))
        a.fed = any(_same(x, t) for x in given for t in last)
        if not a.fed:
            self.after = None

    def on_step(self) -> None:
        self.steps += 1
        a = self.after
        if a is not None and a.fed and a.step_frame is None:
            a.step_frame = user_frame_from_stack(1)

    def end(self) -> list[Any]:
        self._close()
        if len(self.found) < MIN_PASSES:
            return []
        loaded = sum(f["samples"] for f in self.found)
        stepped = sum(f["stepped_samples"] for f in self.found)
        share = 1 - stepped / max(loaded, 1)
        first = self.found[0]
        frame = first["step_frame"] or first["frame"]
        evidence = {
            "passes": len(self.found), "batches_loaded": sum(f["batches"] for f in self.found),
            "samples_loaded": loaded, "samples_that_reached_a_step": stepped,
            "optimizer_steps_after_the_loop": sum(f["steps"] for f in self.found),
            "backward_calls_after_the_loop": sum(f["backwards"] for f in self.found),
            "first_pass": {k: first[k] for k in ("batches", "samples", "last_batch", "steps")},
            "loader": first["loader"],
            "loop_at": f"{first['frame'].file}:{first['frame'].line}" if first["frame"] else "?",
            "harm": f"{loaded - stepped} of {loaded} samples loaded ({share:.1%}) never reached a backward or a step",
        }
        fields = {"loader": first["loader"], "passes": len(self.found), "batches": first["batches"],
                  "steps": first["steps"],
                  "lost": loaded - stepped, "samples": loaded, "share": f"{100 * share:.1f}%",
                  "loop": first["frame"].source.strip() if first["frame"] else "the batch loop"}
        sev = "warning" if share >= 0.5 else "info"
        return [finding("coverage_lost", "after_loop", sev, frame, fields, evidence)]

    # ------------------------------------------------------------------ helpers
    def _close(self) -> None:
        a, self.after = self.after, None
        if a is None or not a.fed or len(self.found) >= MOST_KEPT:
            return
        forwards, backwards, steps = (x - y for x, y in zip(self.counters(), a.mark))
        if backwards < 1 or steps < 1 or backwards >= len(a.p.sizes):
            return  # collected batches trained one by one afterwards, or nothing trained
        self.found.append({"loader": a.p.loader, "batches": len(a.p.sizes), "samples": sum(a.p.sizes),
                           "last_batch": a.p.sizes[-1],
                           "stepped_samples": a.p.sizes[-1], "steps": steps, "backwards": backwards,
                           "frame": a.p.frame, "step_frame": a.step_frame})


def _same(x: torch.Tensor, t: torch.Tensor) -> bool:
    """`x` is the batch tensor `t`, or a copy or view of it (`.to(device)`, `.float()`, `.view(n, -1)`)."""
    if x is t:
        return True
    if x.numel() != t.numel() or x.numel() == 0:
        return False
    try:
        with torch.no_grad():  # (a view of it, `data.view(-1, 784)`, counts too)
            return bool(torch.equal(x.detach().reshape(-1).to(t.device, t.dtype), t.reshape(-1)))
    except Exception:  # (incomparable kinds: not the batch)
        return False
