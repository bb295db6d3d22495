"""Hugging Face integration: `TriageTrainerCallback` watches the model and optimizer of a
`transformers.Trainer` run.

    from torchtriage.integrations.hf import TriageTrainerCallback
    with TriageTrainerCallback(html="triage.html") as cb:
        trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[cb])
        trainer.train()
    print(cb.report)
"""

from __future__ import annotations

import sys
from typing import Any, Literal

from .._catalogue import msg

try:
    from transformers import TrainerCallback
except ImportError:
    raise ImportError(msg("integration.missing", framework="transformers", extra="hf")) from None

from .._findings import Report
from .._frames import find_frame
from ._common import SessionHolder, ddp_wrapper

__all__ = ["TriageTrainerCallback"]


class TriageTrainerCallback(TrainerCallback):
    """A `transformers.TrainerCallback` that runs torchtriage's checks over `trainer.train()`.

    The session opens in `on_train_begin` (the Trainer passes the model and the optimizer;
    accelerate's wrapper is looked through) with `discover=False`, and closes in
    `on_train_end`. The Trainer has no callback for exceptions: the callback wraps the
    Trainer's `training_step` for the run (a crash in forward / loss / backward is triaged at
    once, the report printed, every hook removed, the exception re-raised unchanged), and an
    exception elsewhere that ends the program is reported before its traceback. The callback
    is also a context manager (`with TriageTrainerCallback() as cb: ... trainer.train()`) for
    code that catches the exception itself. At the end the report is printed on the main
    process when something was found, one line when nothing was.

    Arguments:
        on_anomaly: "record" (default), "warn", "raise" or "skip_step".
        checks: "default", or check names / `Checker` instances.
        json: write the final report as JSON to this path.
        html: write the final report as a standalone HTML page to this path.
        report: print the text report to stderr at the end: "auto" (default: the report when
            something was found, else one line), True, or False.
        tensorboard: a log folder or a `SummaryWriter`: loss, gradient norm, lr and findings.
        wandb: True (the active run, or a new one) or a wandb run: the same, to W&B.
        lang: language of messages ("en", "zh").
        **options: further `Session` options.

    Example:
        >>> cb = TriageTrainerCallback(json="triage.json")
        >>> Trainer(model=model, args=args, train_dataset=ds, callbacks=[cb]).train()
        >>> cb.report.primary
    """

    def __init__(self, *, on_anomaly: str = "record", checks: Any = "default", json: Any = None,
                 html: Any = None, report: bool | str = "auto", lang: str | None = None, **options: Any) -> None:
        self._holder = SessionHolder(on_anomaly=on_anomaly, checks=checks, json=json, html=html,
                                     report=report, lang=lang, options=options)

    @property
    def report(self) -> Report | None:
        """The report: live during training, final after it; None before it starts."""
        return self._holder.report

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       **kwargs: Any) -> None:
        self._holder.rank_zero = bool(getattr(state, "is_world_process_zero", True))
        trainer = _calling_trainer()
        if model is not None and trainer is not None:
            model = ddp_wrapper(model, getattr(trainer, "model_wrapped", None))
        self._holder.open([model] if model is not None else [], [optimizer] if optimizer is not None else [])
        if trainer is not None:
            self._holder.guard(trainer, "training_step")
        self._holder.guard_uncaught()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._holder.rank_zero = bool(getattr(state, "is_world_process_zero", True))
        self._holder.close(None)

    def close(self, exc: BaseException | None = None) -> None:
        """Close the session (idempotent); `exc` is triaged when given."""
        self._holder.close(exc)

    def __enter__(self) -> TriageTrainerCallback:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        self._holder.close(exc)
        return False


def _calling_trainer() -> Any:
    """The `transformers.Trainer` whose loop called this callback (a few frames up), or None."""
    from transformers import Trainer

    f = find_frame(lambda f: isinstance(f.f_locals.get("self"), Trainer), sys._getframe(1), depth=16)
    return f.f_locals["self"] if f is not None else None
