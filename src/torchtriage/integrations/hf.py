"""Hugging Face integration: `TriageTrainerCallback` watches the model and optimizer of a
`transformers.Trainer` run.

    from torchtriage.integrations.hf import TriageTrainerCallback
    with TriageTrainerCallback(html="triage.html") as cb:
        trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[cb])
        trainer.train()
    print(cb.report)
"""

from __future__ import annotations

from typing import Any

from .._catalogue import msg

try:
    from transformers import TrainerCallback
except ImportError:
    raise ImportError(msg("integration.missing", framework="transformers", extra="hf")) from None

from .._findings import Report
from ._common import SessionHolder

__all__ = ["TriageTrainerCallback"]


class TriageTrainerCallback(TrainerCallback):  # type: ignore[misc]
    """A `transformers.TrainerCallback` that runs torchtriage's checks over `trainer.train()`.

    The session opens in `on_train_begin` (the Trainer passes the model and the optimizer;
    accelerate's wrapper is looked through) with `discover=False`, and closes in
    `on_train_end`. The Trainer has no callback for exceptions: use the callback as a context
    manager (`with TriageTrainerCallback() as cb: ... trainer.train()`) so that a failing run
    is triaged and every hook removed, or call `cb.close()` yourself.

    Arguments:
        on_anomaly: "record" (default), "warn", "raise" or "skip_step".
        checks: "default", or check names / `Checker` instances.
        json: write the final report as JSON to this path.
        html: write the final report as a standalone HTML page to this path.
        report: print the text report to stderr at the end: "auto", True, or False (default).
        lang: language of messages ("en", "zh").
        **options: further `Session` options.

    Example:
        >>> cb = TriageTrainerCallback(json="triage.json")
        >>> Trainer(model=model, args=args, train_dataset=ds, callbacks=[cb]).train()
        >>> cb.report.primary
    """

    def __init__(self, *, on_anomaly: str = "record", checks: Any = "default", json: Any = None,
                 html: Any = None, report: bool | str = False, lang: str | None = None, **options: Any) -> None:
        self._holder = SessionHolder(on_anomaly=on_anomaly, checks=checks, json=json, html=html,
                                     report=report, lang=lang, options=options)

    @property
    def report(self) -> Report | None:
        """The report: live during training, final after it; None before it starts."""
        return self._holder.report

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       **kwargs: Any) -> None:
        self._holder.open([model] if model is not None else [], [optimizer] if optimizer is not None else [])

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._holder.close(None)

    def close(self, exc: BaseException | None = None) -> None:
        """Close the session (idempotent); `exc` is triaged when given."""
        self._holder.close(exc)

    def __enter__(self) -> TriageTrainerCallback:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        self._holder.close(exc)
        return False
