"""The one wrapper of `Optimizer.zero_grad` and `Module.zero_grad` a session installs.

Checks that must see a gradient reset before it happens (the step ledger's discarded gradients,
`_ledger_step/_discarded.py`; dynamics' gradient writes that a reset throws away,
`_dynamics/_gradwrites.py`) register a listener. Each listener gets the object whose
`zero_grad` runs, its kind ("optimizer" or "module") and the frame that called `zero_grad`; the
listeners run in registration order, then the user's `zero_grad`. A listener that raises is our
bug: it is reported once (`session.internal_error`) and the user's call goes on. The wrappers are
session patches, restored on exit; a later entry of the session installs them again.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Callable

import torch

Listener = Callable[[Any, str, Any], None]

# per session: its listeners and the wrapper now installed (to tell a restored patch)
_installed: weakref.WeakKeyDictionary[Any, tuple[list[tuple[str, Listener]], Any]] = weakref.WeakKeyDictionary()


def on_zero_grad(session: Any, where: str, listener: Listener) -> None:
    """Call `listener(obj, kind, caller_frame)` before every `zero_grad` of an optimizer or a
    module while `session` runs (`where` names the listener in an internal-error warning)."""
    entry = _installed.get(session)
    if entry is None or torch.optim.Optimizer.zero_grad is not entry[1]:
        listeners: list[tuple[str, Listener]] = []
        entry = _installed[session] = (listeners, _install(session, listeners))
    entry[0].append((where, listener))


def _install(session: Any, listeners: list[tuple[str, Listener]]) -> Any:
    def wrap(original: Any, kind: str) -> Any:
        def zero_grad(self: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if not session.busy:
                caller = sys._getframe(1)
                for where, listener in listeners:
                    try:
                        listener(self, kind, caller)
                    except Exception as e:  # our bug: the user's zero_grad runs regardless
                        session.internal_error(where, e)
            return original(self, *args, **kwargs)

        zero_grad.__wrapped__ = original  # type: ignore[attr-defined]
        return zero_grad

    optimizer_wrapper = wrap(torch.optim.Optimizer.zero_grad, "optimizer")
    session.patch(torch.optim.Optimizer, "zero_grad", optimizer_wrapper)
    session.patch(torch.nn.Module, "zero_grad", wrap(torch.nn.Module.zero_grad, "module"))
    return optimizer_wrapper
