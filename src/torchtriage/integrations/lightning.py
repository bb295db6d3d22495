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
from ._common import SessionHolder, ddp_wrapper

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
        report: print the text report to stderr at the end of fit, on global rank zero:
            "auto" (default: the report when something was found, else one line), True, False.
        tensorboard: a log folder, a `SummaryWriter`, or True (the trainer's TensorBoardLogger):
            loss, gradient norm, lr and the findings.
        wandb: True (the active run, e.g. a WandbLogger's) or a wandb run: the same, to W&B.
        lang: language of messages ("en", "zh").
        **options: further `Session` options.

    Example:
        >>> cb = TriageCallback(json="triage.json")
        >>> lightning.Trainer(callbacks=[cb], max_epochs=1).fit(model, loader)
        >>> cb.report.primary
    """

    def __init__(self, *, on_anomaly: str = "record", checks: Any = "default", json: Any = None,
                 html: Any = None, report: bool | str = "auto", lang: str | None = None, **options: Any) -> None:
        super().__init__()
        # tensorboard=True means the trainer's own TensorBoard logger, known at fit start.
        self._tb_from_trainer = options.get("tensorboard") is True
        if self._tb_from_trainer:
            options = {k: v for k, v in options.items() if k != "tensorboard"}
        self._holder = SessionHolder(on_anomaly=on_anomaly, checks=checks, json=json, html=html,
                                     report=report, lang=lang, options=options)

    @property
    def report(self) -> Report | None:
        """The report: live during fit, final after it; None before fit starts."""
        return self._holder.report

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._holder.rank_zero = bool(getattr(trainer, "is_global_zero", True))
        overrides = {}
        if self._tb_from_trainer:
            overrides["tensorboard"] = _trainer_summary_writer(trainer)
        model = ddp_wrapper(pl_module, getattr(getattr(trainer, "strategy", None), "model", None))
        self._holder.open([model], list(getattr(trainer, "optimizers", []) or []), **overrides)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._holder.close(None)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._holder.close(exception)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._holder.close(None)


def _trainer_summary_writer(trainer: Any) -> Any:
    """The `SummaryWriter` of the trainer's TensorBoard logger (tensorboard=True)."""
    for logger in getattr(trainer, "loggers", []) or []:
        experiment = getattr(logger, "experiment", None)
        if hasattr(experiment, "add_scalar") and hasattr(experiment, "add_text"):
            return experiment
    from .._errors import ConfigError

    raise ConfigError(msg("integration.no_tensorboard_logger"))
