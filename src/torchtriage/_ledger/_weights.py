"""A weighted sampler's weights are per sample (session 9).

`WeightedRandomSampler(weights, num_samples)` draws indices `0 .. len(weights) - 1` with
`torch.multinomial`: its weight vector has one entry per sample of the dataset it samples. A
vector of one weight per *class* (`1 / class_counts`, a length of 2 for a binary task) makes it
draw only the first `len(weights)` samples of the dataset, again and again: every other sample
is never trained on, and the classes are not balanced at all.

The invariant: a training loader whose sampler holds a per-sample weight vector (a 1-D
`weights` attribute) has as many weights as its dataset has samples. Measured over the run from
the ledger's indices: the samples drawn, the distinct samples they were, and the samples never
drawn. Severity: a warning when the samples the weights cannot reach (`len(dataset) -
len(weights)`) are at least `LOST_SHARE` of the dataset and were indeed never drawn over at least
one epoch's worth of draws (harm measured: those samples were never trained on); `info` below.
The line is where the sampler was made (seen through a wrapper of `WeightedRandomSampler.__init__`
installed with `Session.patch`), else where the loader was made.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import torch

from .._frames import UserFrame, user_frame_from_stack
from ._make import finding
from ._make import label as _label

if TYPE_CHECKING:
    from ._epochs import Loader

LOST_SHARE = 0.05


class SamplerLines:
    """Where each `WeightedRandomSampler` of the user's was made (weakly keyed by the sampler)."""

    def __init__(self, session: Any) -> None:
        self.made: weakref.WeakKeyDictionary[Any, UserFrame] = weakref.WeakKeyDictionary()
        from torch.utils.data import WeightedRandomSampler

        original = WeightedRandomSampler.__init__
        lines = self

        def __init__(sampler: Any, *args: Any, **kwargs: Any) -> None:
            original(sampler, *args, **kwargs)
            try:
                frame = user_frame_from_stack(2)
                if frame is not None:
                    lines.made[sampler] = frame
            except Exception:  # (our bookkeeping never breaks the user's sampler)
                pass

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        session.patch(WeightedRandomSampler, "__init__", __init__)

    def note(self, entry: Loader, sampler: Any) -> None:
        """At a loader's first pass: the length of its sampler's per-sample weight vector."""
        weights = getattr(sampler, "weights", None)
        if not isinstance(weights, torch.Tensor) or weights.dim() != 1:
            return
        entry.weights = int(weights.numel())
        entry.weights_made = self.made.get(sampler)


def judge(entry: Loader) -> Any:
    if not entry.weights or not entry.size or entry.weights >= entry.size or not entry.trains:
        return None
    epochs = [s for s in entry.summaries if s["trained_batches"]]
    draws = sum(s["samples"] for s in epochs)
    distinct = int(entry.seen.sum()) if entry.seen is not None else None
    unreachable = entry.size - entry.weights
    share = unreachable / entry.size
    # Harm measured: the samples past the weight vector were never drawn, over at least one
    # epoch's worth of draws (the ledger's indices say which samples were drawn).
    never = entry.size - distinct if distinct is not None else None
    harmful = share >= LOST_SHARE and draws >= entry.size and never is not None and never >= unreachable
    frame = entry.weights_made or entry.made or entry.frame
    evidence = {"loader": entry.name, "loader_at": entry.where(), "sampler": entry.sampler,
                "weights_length": entry.weights, "dataset_size": entry.size, "draws": draws,
                "epochs": len(epochs), "distinct_drawn": distinct, "never_drawn": never,
                "unreachable": unreachable, "share_unreachable": round(share, 4)}
    fields = {"loader": _label(entry), "where": entry.where(), "sampler": entry.sampler, "weights": entry.weights,
              "size": entry.size, "draws": draws, "distinct": distinct if distinct is not None else "?",
              "never": never if never is not None else "?", "share": f"{100 * share:.1f}%"}
    return finding("sampler_weights_length", "sampler_weights", "warning" if harmful else "info", frame,
                   fields, evidence)
