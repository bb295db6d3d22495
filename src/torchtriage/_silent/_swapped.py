"""A loss whose prediction and target arguments are swapped (session 16).

The losses that are not symmetric in their two arguments (cross_entropy, binary cross-entropy,
kl_div) read the first as scores (logits, probabilities, log-probabilities) and the second as
what to match. `criterion(labels, model(x))` hands the model's output to the target slot: the
gradient reaches the model only through the target, and the loss is computed with the labels as
logits. Evidence, all measured on the call: the input carries no graph while the target comes
from the model (it requires grad, with a grad_fn), and the input holds only 0s and 1s (one-hot or
binary labels) while the target lies in [0, 1] (probabilities). For cross_entropy on one-hot
input rows over C classes the loss can never fall below log(e + C - 1) - 1, whatever the model
does: the floor goes in the evidence. The numbers are read with the step's one read.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._findings import Severity
from ._common import shape
from ._plans import Plan, Verdict

ASYMMETRIC = ("cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div")


def swapped_plan(name: str, inp: torch.Tensor, tgt: torch.Tensor) -> Plan | None:
    """The check for a call of an asymmetric loss whose graph enters through the target only."""
    if name not in ASYMMETRIC or inp.requires_grad or not tgt.requires_grad or tgt.grad_fn is None:
        return None
    if not tgt.is_floating_point() or tgt.shape != inp.shape or inp.numel() < 2:
        return None
    x, t = inp.detach(), tgt.detach()
    labels = ((x == 0) | (x == 1)).all()
    made_by = tgt.grad_fn.name()
    classes = inp.shape[1] if name == "cross_entropy" and inp.dim() >= 2 else 0

    def judge(v: list[float]) -> Verdict | None:
        is_labels, t_min, t_max = v
        if not is_labels or not (t_min >= 0 and t_max <= 1):
            return None
        ev: dict[str, Any] = {"input_values": "only 0 and 1 (labels)", "input_requires_grad": False,
                              "target_producer": made_by, "target_min": round(t_min, 6),
                              "target_max": round(t_max, 6), "shape": shape(inp)}
        if classes > 1:
            ev["loss_floor_per_sample"] = round(math.log(math.e + classes - 1) - 1, 4)
        return dict(name="loss_args_swapped", severity=Severity.WARNING, loss=name,
                    producer=made_by.replace("Backward0", "").lower(), evidence=ev)

    return Plan([labels, t.amin(), t.amax()], judge)
