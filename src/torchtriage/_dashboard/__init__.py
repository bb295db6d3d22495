"""Dashboards: the run's health series and findings written to TensorBoard and W&B.

`Session(tensorboard=DIR_or_SummaryWriter, wandb=True_or_run)` (and `watch`, `torchtriage
run --tensorboard DIR --wandb`, the `%%torchtriage` magic, the Lightning / HF callbacks) adds a
`DashboardLogger` per target after the checks. See docs/frontends.md.
"""

from __future__ import annotations

from typing import Any

from ._logger import DashboardLogger as DashboardLogger


def loggers_from_options(options: dict[str, Any]) -> list[DashboardLogger]:
    """The loggers asked for by `tensorboard=` / `wandb=` in a session's options (popped)."""
    out: list[DashboardLogger] = []
    tb = options.pop("tensorboard", None)
    wb = options.pop("wandb", None)
    if tb is not None and tb is not False:
        from ._tensorboard import TensorBoardSink

        out.append(DashboardLogger(TensorBoardSink.opener(tb)))
    if wb is not None and wb is not False:
        from ._wandb import WandbSink

        out.append(DashboardLogger(WandbSink.opener(wb)))
    return out
