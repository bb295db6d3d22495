"""A gradient exactly zero (or none at all: a `no_grad` cut) in the analysis window, judged over
the whole run (issue 24: severity from harm; issue 26: judge a zero gradient once the parameters
it depends on have moved).

Zero-initialised gates make a branch's gradient exactly zero until the gate itself has moved:
zero-init residual BN (`zero_init_residual`), ReZero / adaLN-Zero, LoRA's `B`, a gate behind an
lr that warms up from 0 by hand (LARS, a per-step `param_group["lr"] = ...`). The window sees the
zeros; the run does not keep them. So a `gradient.zero` finding is held: each of its parameters
gets a post-accumulate-grad hook that folds "this gradient had a non-zero element" into one
boolean on the device (no host read), and at the session's end one read of those flags decides:
some parameter got a non-zero gradient later → the finding is dropped (the zero was the gate's
first steps, or an encoder kept under `no_grad` for its first N updates); none did → the finding
stands, with the number of backward passes it covers.
Only runs with such a finding pay for the hooks, and only on the parameters it names.
"""

from __future__ import annotations

from typing import Any

import torch

from .._deferred import read_scalars
from .._findings import Finding


class ZeroLater:
    """Held `gradient.zero` findings, and whether their parameters' gradients stayed zero."""

    def __init__(self) -> None:
        self._held: list[tuple[Finding, torch.Tensor, list[Any], list[int]]] = []

    def hold(self, finding: Finding, params: list[torch.Tensor]) -> bool:
        """Hold `finding` for `params`; False when there is nothing to watch (keep it as it is)."""
        if not params:
            return False
        flag = torch.zeros((), dtype=torch.bool, device=params[0].device)
        count = [0]

        def seen(p: torch.Tensor) -> None:
            g = p.grad
            if g is not None and not g.is_sparse:
                flag.logical_or_(g.ne(0).any().to(flag.device))
                count[0] += 1

        handles = [p.register_post_accumulate_grad_hook(seen) for p in params]
        self._held.append((finding, flag, handles, count))
        return True

    def release(self) -> list[Finding]:
        """The findings whose parameters never got a non-zero gradient; every hook removed."""
        held, self._held = self._held, []
        for _, _, handles, _ in held:
            for h in handles:
                h.remove()
        if not held:
            return []
        later = read_scalars([flag for _, flag, _, _ in held])  # one read, at the end
        out = []
        for (f, _, _, count), nonzero in zip(held, later):
            if nonzero:
                continue  # a gate opened: the zero was its first steps
            out.append(f.replace(evidence={**f.evidence, "later_gradients_all_zero": count[0]}))
        return out
