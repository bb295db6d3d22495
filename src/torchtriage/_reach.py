"""Whether a backward reached a forward's output: the one piece of machinery behind "these rows
were trained on" (the runtime leakage check, `_leakage/_runtime`) and "this forward's rows were
never backpropagated" (the data ledger's coverage without a DataLoader, `_ledger/_unbackwarded`).

A pre-hook on the autograd node of the output's first tensor that has one: it runs when a
backward's gradient arrives there, returns nothing (the gradient is untouched), and lives and dies
with the graph. A forward whose outputs have no graph is not watchable (`False`)."""

from __future__ import annotations

from typing import Any, Callable

from ._loaderstream import tensors


def when_reached(output: Any, arrived: Callable[[], None]) -> bool:
    """Calls `arrived()` each time a backward reaches `output`'s graph; False when it has none."""
    node = next((t.grad_fn for t in tensors(output) if t.grad_fn is not None), None)
    if node is None:
        return False

    def hook(_grad_outputs: Any) -> None:
        arrived()

    node.register_prehook(hook)
    return True
