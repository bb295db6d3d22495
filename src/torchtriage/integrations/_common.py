"""What both framework callbacks share: one `Session` opened when training starts, closed
when it ends or fails, and the report written where the user asked."""

from __future__ import annotations

import os
from typing import Any

import torch

from .._catalogue import msg
from .._findings import Report
from .._session import Session


def _check_path(what: str, path: Any) -> str | None:
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(msg("integration.bad_path", what=what, path=path))
    return os.fspath(path)


def unwrap_optimizer(optimizer: Any) -> torch.optim.Optimizer | None:
    """The torch optimizer under framework wrappers (accelerate, Lightning) that forward `step`."""
    seen = 0
    while optimizer is not None and seen < 4:
        inner = getattr(optimizer, "optimizer", None)
        if isinstance(inner, torch.optim.Optimizer):
            optimizer, seen = inner, seen + 1
            continue
        break
    return optimizer if isinstance(optimizer, torch.optim.Optimizer) else None


class SessionHolder:
    """Opens and closes a discover=False session around a framework's training run."""

    def __init__(self, *, on_anomaly: str, checks: Any, json: Any, html: Any, report: bool | str,
                 lang: str | None, options: dict[str, Any]) -> None:
        self.json_path = _check_path("json", json)
        self.html_path = _check_path("html", html)
        self._kwargs = dict(on_anomaly=on_anomaly, checks=checks, report=report, lang=lang, **options)
        # Validate the options now, where the user wrote them, not when training starts.
        Session(**self._kwargs)
        self._session: Session | None = None
        self._active: Session | None = None
        self._report: Report | None = None

    @property
    def report(self) -> Report | None:
        """The live report while training runs, the final one after; None before it starts."""
        if self._active is not None:
            return self._active.report
        return self._report

    @property
    def running(self) -> bool:
        return self._session is not None

    def open(self, models: list[torch.nn.Module], optimizers: list[Any]) -> None:
        if self._session is not None:
            self.close(None)
        opts = [o for o in (unwrap_optimizer(o) for o in optimizers) if o is not None]
        session = Session(None, opts, discover=False, **self._kwargs)
        self._session = session
        # Inside `torchtriage run` (or another watch) the outer session adopts our models.
        self._active = session.__enter__()
        for m in models:
            # the framework holds the model: no user variable to name it by, its class does
            self._active.watch_model(m, type(m).__name__)

    def close(self, exc: BaseException | None) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        active, self._active = self._active, None
        try:
            session.__exit__(type(exc) if exc is not None else None, exc, exc.__traceback__ if exc else None)
        finally:
            self._report = active.report if active is not None else session.report
            self._write(self._report)

    def _write(self, report: Report) -> None:
        if self.json_path:
            from ..report import dump_json

            dump_json(report, self.json_path)
        if self.html_path:
            from ..report import render_html

            with open(self.html_path, "w", encoding="utf-8") as fh:
                fh.write(render_html(report))
