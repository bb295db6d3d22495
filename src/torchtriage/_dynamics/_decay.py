"""Weight decay by tensor rank: which parameters the optimizer's groups actually decay.

Param groups split by a name test (`"bias"`, `"LayerNorm.weight"` in the name: no decay) exist
to keep decay off biases and normalization scales, the 1-D parameters, and on the weight
matrices. The invariant is read from the tensors, not their names: when an optimizer's groups
differ in `weight_decay`, the decayed groups hold weight matrices (>= 2-D). Decay on 1-D
tensors only, while every trainable matrix sits in a `weight_decay=0` group, is the name test
inverted. Checked once per optimizer, at its first step (shapes and group numbers only).
"""

from __future__ import annotations

from typing import Any

from .._findings import Category, Finding, Stage
from ._common import finding, num


def _trainable(g: dict[str, Any]) -> list[Any]:
    return [p for p in g.get("params", []) if getattr(p, "requires_grad", False)]


def decay_inverted(session: Any, opt: Any) -> Finding | None:
    """A `dynamics.weight_decay_inverted` finding for `opt`, or None."""
    groups = getattr(opt, "param_groups", [])
    decayed: list[Any] = []
    free: list[Any] = []
    rates = set()
    for g in groups:
        wd = g.get("weight_decay")
        if not isinstance(wd, (int, float)):
            return None
        params = _trainable(g)
        if not params:
            continue
        (decayed if wd > 0 else free).extend(params)
        if wd > 0:
            rates.add(float(wd))
    if not decayed or not free or any(p.dim() >= 2 for p in decayed):
        return None
    matrices = [p for p in free if p.dim() >= 2]
    if not matrices:
        return None
    infos = session.param_index.infos()

    def name(p: Any) -> str:
        info = infos.get(id(p))
        return info.qualname if info is not None else "?"

    n_dec = sum(p.numel() for p in decayed)
    n_mat = sum(p.numel() for p in matrices)
    total = n_dec + sum(p.numel() for p in free)
    share = n_mat / total if total else 0.0
    wd = max(rates)
    names = [name(p) for p in decayed]
    return finding("weight_decay_inverted", category=Category.OTHER, stage=Stage.OPTIMIZER, step=session.step,
                   op=type(opt).__name__,
                   parameter=", ".join(names[:3]), wd=num(wd), decayed=len(decayed), decayed_numel=n_dec,
                   matrices=len(matrices), matrices_numel=n_mat, share=f"{share:.1%}",
                   optimizer=type(opt).__name__,
                   evidence={"weight_decay": num(wd), "decayed_tensors": len(decayed),
                             "decayed_elements": n_dec, "decayed_ranks": sorted({p.dim() for p in decayed}),
                             "decayed_examples": names[:4],
                             "undecayed_matrices": len(matrices), "undecayed_matrix_elements": n_mat,
                             "undecayed_examples": [name(p) for p in matrices[:4]],
                             "harm": f"{share:.1%} of the trainable elements (every weight matrix) get no "
                                     f"weight decay; it lands on {len(decayed)} 1-D tensors only"})
