"""Per-sample side data looked up by batch position while the loader shuffles (issue 25,
`data.side_misaligned`).

A model fed a batch and, next to it, a tensor of per-sample side data kept outside the dataset
(the previous epoch's predicted masks fed back as priors, cached features, pseudo-labels, a
memory bank) needs that side row to belong to the batch's sample. A program that takes the side
rows by the batch counter (``side[i * b:(i + 1) * b]``) is right while its loader keeps dataset
order and wrong once the loader shuffles: each sample is paired with another sample's row.

The invariant: a side input carries information about its own sample, in every loader that
feeds it. Measured at the first root forward after each DataLoader batch: an input of the
forward that is no tensor of the batch, floating point, of the batch's size and with the shape
of one of the batch's tensors (a mask beside the target mask, features beside the features) is
compared row by row with that batch tensor: rows centred on the batch mean, the mean cosine of
each side row with its own sample's row against the mean with the other samples' (the contrast),
summed on the device per (model, input position, loader) for at most `MOST` batches, read at
the end. A side input whose rows match their samples in a loader that keeps dataset order
(contrast at least `ALIGNED`) and match them no better than other samples' in a loader that
shuffles (contrast at most `CHANCE` of that) is looked up by position: a warning, with both
contrasts, the batches and the training forward's line. Quiet: side data looked up by the
samples' ids (it matches in the shuffled loader too), inputs that are no side data of the
samples (noise, a fixed code: they match in no loader), the batch itself moved or normalized on
the device (in the ordered loader most rows are their sample's row, cosine above `SAME`: a
training-only augmentation on the device is no side data).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from .._frames import user_frame_from_stack
from .._loaderstream import tensors as batch_tensors
from ._make import finding
from ._make import label as _label

if TYPE_CHECKING:
    from ._checker import DataLedger
    from ._epochs import Loader

MOST = 256  # batches measured per (model, input, loader)
MIN_BATCHES = 4
MIN_ROWS = 2
MAX_ROWS = 64  # rows of a batch compared (a bounded cost per batch)
MAX_COLS = 4096  # cells of a row compared
ALIGNED = 0.2  # own-row minus other-row mean cosine of side data that belongs to its samples
SAME = 0.999  # cosine of a row with its sample's row above which it is that row, transformed
CHANCE = 0.25  # ... of which a shuffled loader keeps at most this share: no better than another sample's row


class _Acc:
    def __init__(self, entry: Loader, shuffled: bool, frame: Any) -> None:
        self.entry, self.shuffled, self.frame = entry, shuffled, frame
        self.sums: torch.Tensor | None = None  # (own cosine, other cosine) summed over batches
        self.batches = 0


class SideData:
    """A listener of the loader stream (after the ledger's follower: its passes)."""

    def __init__(self, ledger: DataLedger) -> None:
        self.ledger = ledger
        self.pending: tuple[Loader, bool, list[weakref.ref[torch.Tensor]], int] | None = None
        self.accs: dict[tuple[int, int, int], _Acc] = {}

    def on_batch(self, it: Any, indices: Any, data: Any) -> None:
        self.pending = None
        p = self.ledger.follower.passes.get(it)
        if p is None:
            return
        ts = [t for t in batch_tensors(data) if t.dim() >= 2]
        if not ts:
            return
        size = int(ts[0].shape[0])
        if size < MIN_ROWS:
            return
        self.pending = (p.loader, bool(p.epoch.shuffled), [weakref.ref(t) for t in ts], size)

    def on_forward(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        pending, self.pending = self.pending, None
        if pending is None:
            return
        entry, shuffled, refs, size = pending
        batch = [t for t in (r() for r in refs) if t is not None]
        ptrs = {_ptr(t) for t in batch}
        inputs = batch_tensors((args, kwargs))
        for pos, side in enumerate(inputs):
            if not side.is_floating_point() or side.dim() < 2 or int(side.shape[0]) != size or _ptr(side) in ptrs:
                continue
            partner = next((t for t in batch if t.shape == side.shape and t.dtype.is_floating_point), None)
            if partner is None:
                continue
            key = (self.ledger.token_of(model), pos, id(entry))
            acc = self.accs.get(key)
            if acc is None:
                acc = self.accs[key] = _Acc(entry, shuffled, user_frame_from_stack(1))
            if acc.batches >= MOST:
                continue
            with torch.no_grad():
                pair = _contrast(side.detach(), partner.detach())
            acc.sums = pair if acc.sums is None else acc.sums + pair.to(acc.sums.device)
            acc.batches += 1

    def end(self) -> list[Any]:
        groups: dict[tuple[int, int], list[_Acc]] = {}
        for (model, pos, _), acc in self.accs.items():
            if acc.sums is not None and acc.batches >= MIN_BATCHES:
                groups.setdefault((model, pos), []).append(acc)
        out: list[Any] = []
        for accs in groups.values():
            if not any(a.shuffled for a in accs) or all(a.shuffled for a in accs):
                continue
            assert all(a.sums is not None for a in accs)
            with torch.no_grad():
                values = torch.stack([a.sums.to("cpu") / a.batches for a in accs if a.sums is not None]).tolist()
            contrast = [own - other for own, other, _ in values]
            if any(same >= 0.5 for (_, _, same), a in zip(values, accs) if not a.shuffled):
                continue  # the batch itself, moved or normalized on the device (augmented in training): no side data
            ordered = [(c, a) for c, a in zip(contrast, accs) if not a.shuffled]
            mixed = [(c, a) for c, a in zip(contrast, accs) if a.shuffled and a.entry.trains]
            if not ordered or not mixed:
                continue
            c_ord, a_ord = max(ordered, key=lambda x: x[0])
            c_mix, a_mix = min(mixed, key=lambda x: x[0])
            if c_ord < ALIGNED or c_mix > CHANCE * c_ord:
                continue
            fields = {"loader": _label(a_mix.entry), "where": a_mix.entry.where(), "mixed": f"{c_mix:.3f}",
                      "ordered": f"{c_ord:.3f}", "other": _label(a_ord.entry), "batches": a_mix.batches}
            evidence = {"shuffled_loader": a_mix.entry.name, "shuffled_loader_at": a_mix.entry.where(),
                        "ordered_loader": a_ord.entry.name, "contrast_shuffled": round(c_mix, 4),
                        "contrast_ordered": round(c_ord, 4), "batches_shuffled": a_mix.batches,
                        "batches_ordered": a_ord.batches}
            out.append(finding("side_misaligned", "side_misaligned", "warning", a_mix.frame, fields, evidence))
        return out


def _ptr(t: torch.Tensor) -> tuple[int, int]:
    try:
        return (t.untyped_storage().data_ptr(), int(t.storage_offset()))
    except (RuntimeError, NotImplementedError):
        return (0, 0)


def _contrast(side: torch.Tensor, partner: torch.Tensor) -> torch.Tensor:
    """(mean cosine of each side row with its own sample's row, mean with the other samples',
    share of rows that are their sample's row, transformed), on
    the rows centred on the batch mean (at most `MAX_ROWS` rows, `MAX_COLS` evenly spaced cells),
    as one float64 pair on the device."""
    rows = min(int(side.shape[0]), MAX_ROWS)
    a = side[:rows].reshape(rows, -1)
    b = partner[:rows].reshape(rows, -1)
    step = max(1, -(-a.shape[1] // MAX_COLS))  # at most MAX_COLS evenly spaced cells a row
    a, b = a[:, ::step].double(), b[:, ::step].to(a.device).double()  # (a batch left on the host: its sample only)
    a = a - a.mean(0, keepdim=True)
    b = b - b.mean(0, keepdim=True)
    a = a / a.norm(dim=1, keepdim=True).clamp_min(1e-12)
    b = b / b.norm(dim=1, keepdim=True).clamp_min(1e-12)
    s = a @ b.T
    n = s.shape[0]
    own = s.diagonal().mean()
    other = (s.sum() - s.diagonal().sum()) / (n * (n - 1))
    same = (s.diagonal() > SAME).double().mean()  # rows that are their sample's row, transformed
    return torch.stack([own, other, same])
