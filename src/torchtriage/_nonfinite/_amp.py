"""Mixed precision: tell GradScaler's expected skipped steps from real trouble.

`GradScaler.step` unscales the gradients and does not call `optimizer.step()` at all when they
hold inf/NaN (then `update()` lowers the scale). That is the scaler working as designed: at most
an info. A scale that keeps collapsing (many skipped steps in a row) means the gradients are
non-finite at every scale — a finding. The wrappers below (installed through the session, so
removed on exit) only observe: they never change what the scaler does. A skipped step still
ends the iteration: the session's clock (`Session.step_skipped`) closes it.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch

from .._catalogue import msg
from .._findings import Category, Finding, Severity, Stage

COLLAPSE_AFTER = 10  # skipped steps in a row before a warning


class ScalerWatch:
    def __init__(self, read_skipped: Callable[[], object],
                 autocast: Callable[[], list[tuple[str, torch.dtype]]]) -> None:
        # From the sentinel: read a skipped step's flags (its inf/NaN gradients expected), and
        # the step's autocast (device, dtype) pairs.
        self.read_skipped = read_skipped
        self.autocast = autocast
        self.scaled: tuple[weakref.ref[torch.Tensor], Any] | None = None  # the last scale() output
        self.stepped_ids: set[int] = set()  # optimizers whose step() ran inside scaler.step()
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
            if isinstance(out, torch.Tensor) and not session.busy:
                watch.scaled = (weakref.ref(out), scaler)
            return out

        @functools.wraps(original_step)
        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            watch.stepped_ids.discard(id(optimizer))
            result = original_step(scaler, optimizer, *args, **kwargs)
            if not session.busy and scaler.is_enabled():
                try:
                    watch.after_step(session, scaler, optimizer)
                except Exception as e:
                    session.internal_error("nonfinite.amp", e)
            return result

        session.patch(GradScaler, "scale", scale)
        session.patch(GradScaler, "step", step)

    def unscaled(self, root: torch.Tensor) -> torch.Tensor:
        """The loss without the scaler's factor (for the "loss" series), on the device."""
        if self.scaled is not None and self.scaled[0]() is root:
            scaler = self.scaled[1]
            s = getattr(scaler, "_scale", None)
            if isinstance(s, torch.Tensor):
                return root.detach() / s.to(root.device)
        return root

    def stepped(self, optimizer: Any) -> None:
        self.stepped_ids.add(id(optimizer))

    def after_step(self, session: Any, scaler: Any, optimizer: Any) -> None:
        if id(optimizer) in self.stepped_ids:
            self.skips_in_row = 0
            return
        if not any(o is optimizer for o in session.optimizers):
            return
        # Skipped by the scaler: this step's flags (data, outputs, loss) are still read once;
        # its inf/NaN gradients are expected and not localized.
        self.read_skipped()
        self.skips_in_row += 1
        scale = float(scaler.get_scale())  # the scaler has just synced itself; one more read
        step = session.step
        session.add(Finding(Category.NUMERICAL, "numerical.amp_skipped_step",
                            msg("nonfinite.amp_skip", scale=scale, step=step), severity=Severity.INFO,
                            stage=Stage.BACKWARD, step=step, evidence={"scale": scale}))
        if self.skips_in_row >= COLLAPSE_AFTER and not self._collapse_reported:
            self._collapse_reported = True
            dtype = next((str(d).replace("torch.", "") for _, d in self.autocast()), "float16")
            session.add(Finding(Category.NUMERICAL, "numerical.amp_scale_collapse",
                                msg("nonfinite.amp_collapse", skips=self.skips_in_row, scale=scale, step=step),
                                severity=Severity.WARNING, stage=Stage.BACKWARD, step=step,
                                cause=msg("nonfinite.cause.amp_collapse", dtype=dtype),
                                next_check=msg("nonfinite.next.amp_collapse"),
                                evidence={"scale": scale, "skipped in a row": self.skips_in_row}))
        # The iteration is over even though optimizer.step() never ran: the session's clock
        # closes the step so the next batch gets its own snapshot.
        session.step_skipped(optimizer)

    def finish(self) -> None:
        self.scaled = None
