"""Mixed precision: tell GradScaler's expected skipped steps from real trouble.

`GradScaler.step` unscales the gradients and does not call `optimizer.step()` at all when they
hold inf/NaN (then `update()` lowers the scale). That is the scaler working as designed: at most
an info. A scale that keeps collapsing (many skipped steps in a row) means the gradients are
non-finite at every scale — a finding. The wrappers below (installed through the session, so
removed on exit) only observe: they never change what the scaler does.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch

from .._catalogue import msg
from .._findings import Category, Finding, Severity, Stage

COLLAPSE_AFTER = 10  # skipped steps in a row before a warning


class ScalerWatch:
    def __init__(self, sentinel: Any) -> None:
        self.sentinel = sentinel
        self._scaled: tuple[weakref.ref[torch.Tensor], Any] | None = None
        self._stepped: set[int] = set()
        self.skips_in_row = 0
        self._collapse_reported = False

    def install(self, session: Any) -> None:
        try:
            from torch.amp import GradScaler
        except ImportError:  # pragma: no cover - torch < 2.3
            return
        watch = self

        original_scale = GradScaler.scale
        original_step = GradScaler.step

        @functools.wraps(original_scale)
        def scale(scaler: Any, outputs: Any) -> Any:
            out = original_scale(scaler, outputs)
            if isinstance(out, torch.Tensor) and not session._busy:
                watch._scaled = (weakref.ref(out), scaler)
            return out

        @functools.wraps(original_step)
        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            watch._stepped.discard(id(optimizer))
            result = original_step(scaler, optimizer, *args, **kwargs)
            if not session._busy and scaler.is_enabled():
                try:
                    watch._after_step(session, scaler, optimizer)
                except Exception as e:
                    session._internal_error("nonfinite.amp", e)
            return result

        session._patch(GradScaler, "scale", scale)
        session._patch(GradScaler, "step", step)

    def unscaled(self, root: torch.Tensor) -> torch.Tensor:
        """The loss without the scaler's factor (for the "loss" series), on the device."""
        if self._scaled is not None and self._scaled[0]() is root:
            scaler = self._scaled[1]
            s = getattr(scaler, "_scale", None)
            if isinstance(s, torch.Tensor):
                return root.detach() / s.to(root.device)
        return root

    def stepped(self, optimizer: Any) -> None:
        self._stepped.add(id(optimizer))

    def _after_step(self, session: Any, scaler: Any, optimizer: Any) -> None:
        if id(optimizer) in self._stepped:
            self.skips_in_row = 0
            return
        if not any(r() is optimizer for r in session._optimizers):
            return
        # Skipped by the scaler: this step's flags (data, outputs, loss) are still read once;
        # its inf/NaN gradients are expected and not localized.
        self.sentinel._sync(grads=[], optimizer=None, scaled_overflow_ok=True)
        self.skips_in_row += 1
        scale = float(scaler.get_scale())  # the scaler has just synced itself; one more read
        step = session.step
        session.add(Finding(Category.NUMERICAL, "numerical.amp_skipped_step",
                            msg("nonfinite.amp_skip", scale=scale, step=step), severity=Severity.INFO,
                            stage=Stage.BACKWARD, step=step, evidence={"scale": scale}))
        if self.skips_in_row >= COLLAPSE_AFTER and not self._collapse_reported:
            self._collapse_reported = True
            dtype = next((str(d).replace("torch.", "") for _, d in self.sentinel._step.autocast), "float16")
            session.add(Finding(Category.NUMERICAL, "numerical.amp_scale_collapse",
                                msg("nonfinite.amp_collapse", skips=self.skips_in_row, scale=scale, step=step),
                                severity=Severity.WARNING, stage=Stage.BACKWARD, step=step,
                                cause=msg("nonfinite.cause.amp_collapse", dtype=dtype),
                                next_check=msg("nonfinite.next.amp_collapse"),
                                evidence={"scale": scale, "skipped in a row": self.skips_in_row}))
        # The iteration is over even though optimizer.step() never ran: close the session's step
        # so the next batch gets its own snapshot.
        if session._clock is None:
            session._clock = weakref.ref(optimizer)
        if session._clock() is optimizer:
            session._end_step()

    def finish(self) -> None:
        self._scaled = None
