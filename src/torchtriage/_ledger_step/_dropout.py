"""Dropout that stays on in evaluation (issue 26, modes).

`model.eval()` switches every `nn.Dropout` off, but not `F.dropout(x, p)` written in a
`forward`: its `training` argument defaults to True, so the evaluation keeps dropping units and
two evaluations of the same input differ. The functional dropouts are wrapped for the session
(removed on exit). A call that leaves `training` to its default, with `p > 0`, from the
`forward` of a module in `eval()` mode is the finding: that module is random in evaluation.

Sampling on purpose stays quiet: an `nn.Dropout` switched back to `train()` (MC dropout), a
call that passes `training=True` itself, `torch.randn` in a generator's `forward`. The common
path (an `nn.Dropout`, a call passing `training=self.training`) costs one length test.
"""

from __future__ import annotations

import functools
import sys
from types import FrameType
from typing import Any

import torch.nn as nn
import torch.nn.functional as F

from .._findings import Category, Severity, Stage, from_catalogue
from .._frames import user_frame_from_stack

_NAMES = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")
_CALL_IMPL = nn.Module._call_impl.__code__


def calling_module() -> nn.Module | None:
    """The module whose call is on the stack above the caller's caller (None outside a module call)."""
    f: FrameType | None = sys._getframe(2)
    while f is not None:
        if f.f_code is _CALL_IMPL:
            mod = f.f_locals.get("self")
            return mod if isinstance(mod, nn.Module) else None
        f = f.f_back
    return None


class EvalDropoutWatch:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.reported: set[tuple[Any, ...]] = set()

    def install(self) -> None:
        for name in _NAMES:
            original = getattr(F, name, None)
            if original is not None:
                self.session.patch(F, name, self._wrap(original, name))

    def _wrap(self, original: Any, name: str) -> Any:
        watch = self

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if len(args) < 3 and "training" not in kwargs:
                try:
                    watch._check(name, args, kwargs)
                except Exception as e:
                    watch.session.internal_error("ledger.dropout", e)
            return original(*args, **kwargs)

        return wrapped

    def _check(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
        if not isinstance(p, (int, float)) or p <= 0:
            return
        sess = self.session
        if sess.busy:
            return
        mod = calling_module()
        if mod is None or mod.training:
            return
        frame = user_frame_from_stack(3)
        key = (frame.file, frame.line) if frame is not None else (id(mod),)
        if key in self.reported:
            return
        self.reported.add(key)
        path = sess.module_name(mod)
        owner = sess.owner(mod)
        label = sess.model_label(owner) if owner is not None else None
        where = path if path else type(mod).__name__
        fields = {"fn": name, "p": p, "module": where, "cls": type(mod).__name__}
        evidence = {"p": float(p), "module_training": False, "training_argument": "default (True)",
                    "module_class": type(mod).__name__}
        if label:
            evidence["model"] = label
        sess.add(from_catalogue(Category.SILENT, "silent.dropout_in_eval", "ledger.dropout_in_eval", fields=fields,
                                cause_key="ledger.dropout_in_eval.cause", next_key="ledger.dropout_in_eval.next",
                                frame=frame, evidence=evidence, source_line=True, severity=Severity.WARNING,
                                stage=Stage.FORWARD, step=sess.step, module=path, op=name))
