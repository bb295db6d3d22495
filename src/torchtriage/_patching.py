"""The one way torchtriage replaces a library attribute for a while: `Patches`.

The session's wrappers (`torch.autograd.backward`, the `torch.nn.functional` losses,
`Optimizer.__init__`), a check's patches (`session.patch`: GradScaler, scikit-learn, the
transparency patches), the distributed check's collective wrappers and script replay's
interceptions all go through a `Patches`: each patch is undone by the function it returns, and
`restore_all()` undoes the rest in reverse order (on exit and on exceptions). An attribute a
class inherits is deleted again on restore, not copied onto the class.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

_ABSENT = object()  # a patched class attribute that was inherited, not the class's own


def _put_back(entry: tuple[Any, str, Any]) -> None:
    obj, attr, original = entry
    if original is _ABSENT:
        delattr(obj, attr)
    else:
        setattr(obj, attr, original)


class Patches:
    """Attributes replaced until restored, newest last."""

    def __init__(self) -> None:
        self._entries: list[tuple[Any, str, Any]] = []

    def patch(self, obj: Any, attr: str, new: Any) -> Callable[[], None]:
        """Set `obj.attr = new`; returns a function that restores it sooner than `restore_all`."""
        inherited = isinstance(obj, type) and attr not in obj.__dict__
        entry = (obj, attr, _ABSENT if inherited else getattr(obj, attr))
        self._entries.append(entry)
        setattr(obj, attr, new)

        def restore() -> None:
            for i, e in enumerate(self._entries):
                if e is entry:
                    del self._entries[i]
                    _put_back(entry)
                    return

        return restore

    def patched(self, obj: Any, attr: str) -> bool:
        """True while `obj.attr` is patched here."""
        return any(o is obj and a == attr for o, a, _ in self._entries)

    def restore_all(self) -> None:
        for entry in reversed(self._entries):
            _put_back(entry)
        self._entries.clear()


def wrapper(original: Callable[..., Any], around: Callable[..., Any]) -> Callable[..., Any]:
    """`original` wrapped (name and signature kept): a call runs `around(original, *args,
    **kwargs)`. For interceptions off the hot path (replay); the session's own wrappers are
    closures, one Python call per user call."""

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return around(original, *args, **kwargs)

    return wrapped
