"""The hook object the session puts on each watched root in root-only mode (issue 13).

A bound method of the session stored in `model._forward_hooks` travels with the model: a whole
model saved with `torch.save(model, path)` (pytorch/examples super_resolution does it) failed to
pickle the session, and `copy.deepcopy(model)` (an EMA copy, a best-model snapshot) copied the
whole session into the copy. This hook holds the session weakly; a pickled or deep-copied hook
is inert (it returns None, which leaves the call's arguments and output unchanged)."""

from __future__ import annotations

import weakref
from typing import Any


class RootHook:
    __slots__ = ("_session", "_method")

    def __init__(self, session: Any, method: str) -> None:
        self._session = weakref.ref(session) if session is not None else None
        self._method = method

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        session = self._session() if self._session is not None else None
        if session is None:
            return None
        return getattr(session, self._method)(*args, **kwargs)

    def __deepcopy__(self, memo: dict[int, Any]) -> RootHook:
        return RootHook(None, self._method)  # the copy is no watched root

    def __reduce__(self) -> tuple[Any, ...]:
        return (RootHook, (None, self._method))
