"""Does a model read its whole input before any output position? Then targets equal to its
inputs are a reconstruction, not unshifted next-token labels.

`labels_not_shifted` says: the targets equal the tokens the model reads at the same positions,
so a next-token model learns to copy. That holds for a model whose output at position t reads
the tokens up to t (a causal LM). A model whose early outputs change when only later tokens
change (a sequence autoencoder: an encoder summarizes the whole sequence, a decoder rebuilds
it; a denoising encoder) is asked to reconstruct its input on purpose. Measured with the causal
probe (`_sequence.causal_report`) on the first rows of the step's batch, once per model; the
model's modes and the RNG states are put back. Its padding targets are then part of what is
rebuilt (where the sequence ends), so a PAD counted in that loss is worth knowing, not a
warning (`SilentChecker._queue`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

ROWS = 4


class _Bound(nn.Module):
    """The step's model call with its other arguments bound (their first rows): `model(x, *rest, **kw)`."""

    def __init__(self, model: nn.Module, rest: tuple[Any, ...], kw: dict[str, Any]) -> None:
        super().__init__()
        self.inner = model
        self.rest, self.kw = rest, kw

    def forward(self, x: torch.Tensor) -> Any:
        return self.inner(x, *self.rest, **self.kw)


def reads_whole_input(model: nn.Module, ids: torch.Tensor, rest: tuple[Any, ...] = (),
                      kw: dict[str, Any] | None = None) -> bool | None:
    """True when the outputs at the first half of the positions change when only the later
    tokens change; None when the model cannot be probed as `model(ids, *rest, **kw)`."""
    from ._sequence import causal_report, probe_state

    if ids.dim() != 2 or ids.shape[1] < 4:
        return None
    target = _Bound(model, rest, kw or {}) if rest or kw else model
    try:
        with probe_state(model, ids.device):
            report = causal_report(target, ids[:ROWS], ids.shape[1] // 2 - 1, None, None, names=model)
    except Exception:
        return None
    return report.primary is not None


def probe_call(snap: Any, ids: Any) -> tuple[Any, ...] | None:
    """(a weak reference to the step's model, the first rows of its ids, its other arguments with
    their first rows where they hold one per sample) when the model was called as
    `model(ids, ...)`: the call the probe repeats with the later tokens changed."""
    import weakref

    model = getattr(snap, "model", None)
    if model is None or not isinstance(ids, torch.Tensor) or not snap.args or snap.args[0] is not ids:
        return None
    n = ids.shape[0]
    for a in (*snap.args[1:], *snap.kwargs.values()):
        if isinstance(a, torch.Tensor) and a.layout != torch.strided:
            return None  # a sparse or nested argument (a graph's adjacency): no rows to cut
        if isinstance(a, torch.Tensor) and a.shape == ids.shape and not a.is_floating_point() \
                and a.dtype != torch.bool and bool(((a != 0) & (a != 1)).any()):
            return None  # a second token sequence (a decoder's input): the verdict is judged on it

    def rows(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dim() and x.shape[0] == n:
            return x[:ROWS].detach().clone()
        return x

    rest = tuple(rows(a) for a in snap.args[1:])
    kw = {k: rows(v) for k, v in snap.kwargs.items() if k not in ("labels", "targets", "target")}
    return weakref.ref(model), ids[:ROWS].detach().clone(), rest, kw


def marks_padding(whole: Any, pad: Any) -> bool:
    """Does the probed call pass a 0/1 mask (any argument shaped like the ids) whose zeros are
    exactly the positions where the ids hold `pad`? Then the user's code knows those positions are
    padding. Read on the probe's first rows, once per verdict."""
    if len(whole) < 4 or not isinstance(pad, int):
        return False
    ids = whole[1]
    is_pad = ids == pad
    if not bool(is_pad.any()):
        return False
    for t in (*whole[2], *whole[3].values()):
        if isinstance(t, torch.Tensor) and t.shape == ids.shape and not t.is_floating_point() \
                and bool(((t == 0) | (t == 1)).all()) and bool(((t == 0) == is_pad).all()):
            return True
    return False
