"""What both framework callbacks share: one `Session` opened when training starts, closed
when it ends or fails, and the report written where the user asked."""

from __future__ import annotations

import functools
import os
import sys
import types
import warnings
from typing import Any

import torch

from .._catalogue import msg
from .._errors import TriageInternalWarning
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


def ddp_wrapper(model: Any, wrapper: Any) -> Any:
    """The framework's `DistributedDataParallel` around `model` when there is one, else `model`.

    The session watches the wrapper, as `torchtriage run` does for a DDP model it discovers: the
    distributed check reads each rank's local gradients through it and replays its module, never
    DDP's forward and backward with their collectives (watching the inner model alone, a NaN
    received through the all-reduce was replayed through DDP on one rank)."""
    if isinstance(wrapper, torch.nn.parallel.DistributedDataParallel) and any(
            m is model for m in wrapper.modules()):
        return wrapper
    return model


def with_callers(tb: types.TracebackType | None, frame: types.FrameType) -> types.TracebackType | None:
    """`tb` (which starts at `frame`) preceded by entries for `frame`'s callers, outermost first."""
    f = frame.f_back
    while f is not None and tb is not None:
        tb = types.TracebackType(tb, f, f.f_lasti, f.f_lineno)
        f = f.f_back
    return tb


class SessionHolder:
    """Opens and closes a discover=False session around a framework's training run.

    At the end, on the framework's rank zero only (issue 18): the report is printed to stderr
    when something was found (`report="auto"`, the default), or one line saying nothing was;
    `report=True` always prints the whole report, `report=False` prints nothing. The JSON / HTML
    files are written on rank zero too."""

    def __init__(self, *, on_anomaly: str, checks: Any, json: Any, html: Any, report: bool | str,
                 lang: str | None, options: dict[str, Any]) -> None:
        self.json_path = _check_path("json", json)
        self.html_path = _check_path("html", html)
        if report not in (True, False, "auto"):
            raise ValueError(msg("integration.bad_report", value=report))
        self.print_report = report
        self._kwargs = dict(on_anomaly=on_anomaly, checks=checks, report=False, lang=lang, **options)
        # Validate the options now, where the user wrote them, not when training starts.
        Session(**self._kwargs)
        self.rank_zero = True
        self._restore: list[Any] = []
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

    def open(self, models: list[torch.nn.Module], optimizers: list[Any], **overrides: Any) -> None:
        if self._session is not None:
            self.close(None)
        opts = [o for o in (unwrap_optimizer(o) for o in optimizers) if o is not None]
        session = Session(None, opts, discover=False, **dict(self._kwargs, **overrides))
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
        restore, self._restore = self._restore, []
        for undo in reversed(restore):
            undo()
        try:
            session.__exit__(type(exc) if exc is not None else None, exc, exc.__traceback__ if exc else None)
        finally:
            self._report = active.report if active is not None else session.report
            owner = active is None or active is session  # joined an outer session: its owner prints
            if owner:
                # In a distributed job: one report, merged on rank 0 (None on the other ranks).
                job = self._job_report(session)
                self._report = job or self._report
            if self.rank_zero and (not owner or job is not None):
                self._write(self._report)
                if owner:
                    self._print(self._report, exc)

    @staticmethod
    def _job_report(session: Session) -> Report | None:
        try:
            return session.job_report()
        except Exception as e:  # our bug must never break the user's training
            warnings.warn(msg("internal.warning", where="integration.job_report", error=f"{type(e).__name__}: {e}"),
                          TriageInternalWarning, stacklevel=2)
            return session.report

    def guard(self, obj: Any, method: str) -> None:
        """Wrap `obj.method` (an instance attribute, undone at close) so that an exception raised
        inside the framework's loop is triaged and reported at once, while its frames are live."""
        original = getattr(obj, method, None)
        if original is None or not callable(original):
            return
        had_own = method in vars(obj)
        holder = self

        @functools.wraps(original)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            try:
                return original(*args, **kwargs)
            except Exception as e:
                # Triage sees the callers too (the user's `trainer.train()` line when the model
                # is a library's); the exception propagates with its own traceback, unchanged.
                tb = e.__traceback__
                e.__traceback__ = with_callers(tb, sys._getframe())
                try:
                    holder.close(e)
                finally:
                    e.__traceback__ = tb
                raise

        setattr(obj, method, guarded)
        self._restore.append(lambda: setattr(obj, method, original) if had_own else delattr(obj, method))

    def guard_uncaught(self) -> None:
        """Report an exception that ends the program while the session is still open (one the
        framework gives no callback for, such as a data error outside the training step)."""
        previous = sys.excepthook
        holder = self

        def hook(exc_type: Any, exc: BaseException, tb: Any) -> None:
            holder.close(exc)
            previous(exc_type, exc, tb)

        sys.excepthook = hook

        def undo() -> None:
            if sys.excepthook is hook:
                sys.excepthook = previous

        self._restore.append(undo)

    def _print(self, report: Report, exc: BaseException | None) -> None:
        if self.print_report is False:
            return
        if self.print_report is True or exc is not None or report.findings:
            from ..report import render_text

            print(render_text(report), file=sys.stderr)
        else:
            print(msg("integration.nothing_found", steps=report.meta.get("steps", 0)), file=sys.stderr)

    def _write(self, report: Report) -> None:
        if self.json_path:
            from ..report import dump_json

            dump_json(report, self.json_path)
        if self.html_path:
            from .._outputs import write_output
            from ..report import render_html

            write_output(self.html_path, render_html(report), "html_path")
