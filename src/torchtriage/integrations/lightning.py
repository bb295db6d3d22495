"""Lightning integration: `TriageCallback` watches a `LightningModule` and the trainer's
optimizers during `trainer.fit(...)`.

    from torchtriage.integrations.lightning import TriageCallback
    cb = TriageCallback(html="triage.html")
    trainer = lightning.Trainer(callbacks=[cb], ...)
    trainer.fit(model, loader)
    print(cb.report)
"""

from __future__ import annotations

from typing import Any

from .._catalogue import msg

try:
    import lightning.pytorch as pl
except ImportError:
    raise ImportError(msg("integration.missing", framework="lightning", extra="lightning")) from None

from .._findings import Report
from ._common import SessionHolder

__all__ = ["TriageCallback"]


class TriageCallback(pl.Callback):
    """A Lightning callback that runs torchtriage's checks over `trainer.fit`.

    The session opens in `on_fit_start` (when the trainer's optimizers exist) for the
    LightningModule and those optimizers, with `discover=False`, and closes in `on_fit_end`,
    `teardown` or `on_exception` (the exception is triaged, then Lightning re-raises it).

    Arguments:
        on_anomaly: "record" (default), "warn", "raise" or "skip_step".
        checks: "default", or check names / `Checker` instances.
        json: write the final report as JSON to this path.
        html: write the final report as a standalone HTML page to this path.
        report: print the text report to stderr at the end: "auto" (when something was
            found), True, or False (default).
        lang: language of messages ("en", "zh").
        **options: further `Session` options.

    Example:
        >>> cb = TriageCallback(json="triage.json")
        >>> lightning.Trainer(callbacks=[cb], max_epochs=1).fit(model, loader)
        >>> cb.report.primary
    """

    def __init__(self, *, on_anomaly: str = "record", checks: Any = "default", json: Any = None,
                 html: Any = None, report: bool | str = False, lang: str | None = None, **options: Any) -> None:
        super().__init__()
        self._holder = SessionHolder(on_anomaly=on_anomaly, checks=checks, json=json, html=html,
                                     report=report, lang=lang, options=options)

    @property
    def report(self) -> Report | None:
        """The report: live during fit, final after it; None before fit starts."""
        return self._holder.report

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._holder.open([pl_module], list(getattr(trainer, "optimizers", []) or []))

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._holder.close(None)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._holder.close(exception)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._holder.close(None)
