"""The offset between the tokens a model reads and the targets its loss compares
(`data.target_misaligned`, variant `tokens`).

A next-token loss compares the logits at position t with token t + 1 of the same row: exactly
one position ahead. `labels_not_shifted` (`_sequence.py`) is the offset 0. Here, the offset 2 or
more: labels shifted by the data (`Y = tokens[1:]`) and shifted again by the model's causal-LM
loss (`logits[..., :-1, :]` against `labels[..., 1:]`), so the head learns the token two ahead.

Measured on the real tensors, per offset k: the share of the target positions (ignore_index
left out) equal to the input token k positions further, over the columns both have. The
target's columns line up with the logits from position 0 (its width is T - 1, the shifted
convention, or T). A multi-token-prediction head (target t + 2 on purpose) compares only the
tokens inside the input: its target is narrower (T - 2), and is not judged.
"""

from __future__ import annotations

from typing import Any

import torch

from .._findings import Severity, Stage
from ._common import is_index_tensor, shape
from ._plans import Plan, Verdict

OFFSETS = (0, 1, 2, 3)
_SAME = 0.9  # share of positions equal to the input at the offset found
_OTHER = 0.5  # the largest share at offsets 0 and 1 tolerated
_MIN_POSITIONS = 16


def offset_plans(target: Any, ids: Any, *, ignore_index: int = -100, loss: str = "cross_entropy") -> list[Plan]:
    """A next-token target compared with the input ids at offsets 0..3 (no sync)."""
    if not is_index_tensor(target) or not is_index_tensor(ids) or ids.dim() != 2 or target.device != ids.device:
        return []
    b, t = ids.shape
    if not b or t < 4 or target.numel() % b:
        return []
    width = target.numel() // b
    if width not in (t - 1, t) or (target.dim() == 2 and target.shape[0] != b) or target.dim() > 2:
        return []
    grid = target.reshape(b, width)
    valid = grid != ignore_index
    values: list[torch.Tensor] = []
    for k in OFFSETS:
        m = min(width, t - k)
        values += [((grid[:, :m] == ids[:, k:k + m]) & valid[:, :m]).sum(), valid[:, :m].sum()]

    def judge(v: list[float]) -> Verdict | None:
        shares = [v[2 * i] / v[2 * i + 1] if v[2 * i + 1] >= _MIN_POSITIONS else 0.0 for i in range(len(OFFSETS))]
        if max(shares[0], shares[1]) >= _OTHER:
            return None
        k = max(range(2, len(OFFSETS)), key=lambda i: shares[i])
        if shares[k] < _SAME:
            return None
        return dict(name="target_misaligned", family="data", variant="tokens", own_cause=True,
                    severity=Severity.WARNING, stage=Stage.DATA, loss=loss, offset=OFFSETS[k],
                    share=f"{100 * shares[k]:.1f}%", positions=int(v[2 * k + 1]),
                    evidence={"input_ids_shape": shape(ids), "target_shape": shape(target),
                              "offset_found": OFFSETS[k],
                              "share_equal_at_offset": {str(o): round(s, 4) for o, s in zip(OFFSETS, shares)},
                              "positions_compared": int(v[2 * k + 1])})

    return [Plan(values, judge)]
