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


def reads_whole_input(model: nn.Module, ids: torch.Tensor) -> bool | None:
    """True when the outputs at the first half of the positions change when only the later
    tokens change; None when the model cannot be probed as `model(ids)`."""
    from ._sequence import causal_report, probe_state

    if ids.dim() != 2 or ids.shape[1] < 4:
        return None
    try:
        with probe_state(model, ids.device):
            report = causal_report(model, ids[:ROWS], ids.shape[1] // 2 - 1, None, None)
    except Exception:
        return None
    return report.primary is not None


def probe_call(snap: Any, ids: Any) -> tuple[Any, torch.Tensor] | None:
    """(a weak reference to the step's model, the first rows of its ids) when the model was
    called as `model(ids)`: the one call shape the probe repeats."""
    import weakref

    model = getattr(snap, "model", None)
    if model is None or not isinstance(ids, torch.Tensor) or len(snap.args) != 1 or snap.kwargs \
            or snap.args[0] is not ids:
        return None
    return weakref.ref(model), ids[:ROWS].detach().clone()
