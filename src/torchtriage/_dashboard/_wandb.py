"""Weights & Biases: scalars on torchtriage's own step axis, findings as a table and text.

Values are logged under `torchtriage/*` against the metric `torchtriage/step` (declared with
`define_metric`). They join the run's current history row (`commit=False`) instead of committing
rows of their own: a user's `wandb.log(..., step=i)` after ours still lands (W&B drops a row whose
explicit step is below the run's current one), and a user's `wandb.log(...)` commits ours with
it. Only when nobody committed the row since our last values do we commit it before writing the
next step's (one row per training step, as when we are the only writer). W&B's `finish` writes
a row left pending.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .._catalogue import msg
from .._errors import ConfigError
from .._findings import Report
from ._logger import PREFIX

STEP = PREFIX + "step"
COLUMNS = ["step", "severity", "category", "code", "stage", "module", "line", "message"]


def _import_wandb() -> Any:
    try:
        import wandb
    except ImportError:
        raise ImportError(msg("integration.missing", framework="wandb", extra="wandb")) from None
    return wandb


class WandbSink:
    def __init__(self, run: Any, *, owned: bool) -> None:
        self.run = run
        self.owned = owned
        self._pending_at: int | None = None  # the run's step of the row our last values joined
        run.define_metric(STEP)
        run.define_metric(PREFIX + "*", step_metric=STEP)

    @classmethod
    def opener(cls, target: Any) -> Callable[[], WandbSink]:
        """Checks `target` now: `True` (the active run, `wandb.run`, or a new one, finished at
        the end) or a run object; the returned callable makes the sink when the session starts."""
        if target is True:
            wandb = _import_wandb()

            def start() -> WandbSink:
                if wandb.run is not None:
                    return cls(wandb.run, owned=False)
                project = os.environ.get("WANDB_PROJECT", "torchtriage")
                return cls(wandb.init(project=project), owned=True)

            return start
        if hasattr(target, "log") and hasattr(target, "define_metric"):
            return lambda: cls(target, owned=False)
        raise ConfigError(msg("dashboard.bad_wandb", value=target))

    def scalars(self, step: int, values: dict[str, float]) -> None:
        self._log({STEP: step, **values})

    def _log(self, values: dict[str, Any]) -> None:
        """Join the run's current row; commit it first when it still holds our previous values."""
        if self._pending_at is not None and self.run.step == self._pending_at:
            self.run.log({}, commit=True)
        self.run.log(values, commit=False)
        self._pending_at = self.run.step

    def report(self, report: Report, markers: dict[int, float]) -> None:
        wandb = _import_wandb()
        from .._render._fragment import render_fragment
        from ..report import render_text

        for step, value in sorted(markers.items()):
            self._log({STEP: step, PREFIX + "anomaly": value})
        rows = [[f.step, f.severity.value, f.category.value, f.code, f.stage.value if f.stage else None,
                 f.module, f"{f.file}:{f.line}" if f.file else None, f.message] for f in report.findings]
        self._log({PREFIX + "findings": wandb.Table(columns=COLUMNS, data=rows),
                   PREFIX + "report_html": wandb.Html(render_fragment(report))})
        self.run.summary[PREFIX + "report"] = render_text(report)
        self.run.summary[PREFIX + "ok"] = report.ok

    def close(self) -> None:
        if self.owned:
            self.run.finish()
