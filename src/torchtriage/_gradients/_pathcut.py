"""Where the loss's path lost its gradient: the taped op whose input required grad and whose
output, computed with grad enabled, does not (issue 26 item 4).

A loss without `grad_fn` computed from a model's output that did require grad went, somewhere
between the two, through an op with no derivative: `argmax` / `argmin` / `topk` indices, a
comparison, a cast to an integer dtype, `round` / `floor` / `sign` on the way to indices,
`.detach()`. The step tape (`StepRecord.ops`) holds every torch call the loop made outside the
model with its inputs and outputs, so the loss's data flow is followed back from the tensor
given to `backward()` until such an op: its line is the user's line to change (an argmax in
the decoding of the model's output), not a line of the model's `__init__` where PyTorch's
initializers ran under `no_grad`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

MAX_OPS = 4096


def _tensors(x: Any) -> list[torch.Tensor]:
    try:
        return [t for t in pytree.tree_leaves(x) if isinstance(t, torch.Tensor)]
    except Exception:
        return []


def grad_lost_at(ops: list[Any], loss: torch.Tensor) -> Any:
    """The taped op (`TapeOp`) on `loss`'s data flow where the gradient was lost, or None: the
    one nearest the model's output (the first in execution order among those found)."""
    needed = {id(loss)}
    found = None
    for op in reversed(ops[-MAX_OPS:]):
        outs = _tensors(op.output)
        if not any(id(t) in needed for t in outs):
            continue
        ins = _tensors((op.args, op.kwargs))
        needed.update(id(t) for t in ins)
        if not op.grad_enabled or op.before_step:
            continue
        if any(t.requires_grad for t in ins) and not any(t.requires_grad for t in outs if id(t) in needed):
            found = op
    return found
