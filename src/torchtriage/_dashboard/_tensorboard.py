"""TensorBoard: scalars through `torch.utils.tensorboard.SummaryWriter`, findings as text."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .._catalogue import msg
from .._errors import ConfigError
from .._findings import Report
from ._logger import PREFIX


def _markdown(text: str) -> str:
    # TensorBoard's text tab renders Markdown: an indented block keeps the report's layout.
    return "\n".join("    " + line for line in text.splitlines())


class TensorBoardSink:
    def __init__(self, writer: Any, *, owned: bool) -> None:
        self.writer = writer
        self.owned = owned

    @classmethod
    def opener(cls, target: Any) -> Callable[[], TensorBoardSink]:
        """Checks `target` now: a log folder (str / PathLike: a new writer, closed at the end)
        or a `SummaryWriter`; the returned callable makes the sink when the session starts."""
        if hasattr(target, "add_scalar") and hasattr(target, "add_text"):
            return lambda: cls(target, owned=False)
        if not isinstance(target, (str, os.PathLike)):
            raise ConfigError(msg("dashboard.bad_tensorboard", value=target))
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ImportError(msg("integration.missing", framework="tensorboard", extra="tensorboard")) from None
        return lambda: cls(SummaryWriter(log_dir=os.fspath(target)), owned=True)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, global_step=step)

    def report(self, report: Report, markers: dict[int, float]) -> None:
        from .._render._text import render_finding
        from ..report import render_text

        for step, value in sorted(markers.items()):
            self.writer.add_scalar(PREFIX + "anomaly", value, global_step=step)
        for f in report.findings:
            self.writer.add_text(PREFIX + "findings", _markdown("\n".join(render_finding(f))),
                                 global_step=f.step if f.step is not None else 0)
        self.writer.add_text(PREFIX + "report", _markdown(render_text(report)),
                             global_step=int(report.meta.get("steps", 0) or 0))

    def close(self) -> None:
        if self.owned:
            self.writer.close()
        else:
            self.writer.flush()
