"""`check_training_loop`: run a few iterations of the user's own loop under the silent checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from .._findings import Report


def check_training_loop(step: Callable[[int], Any], *, model: nn.Module,
                        optimizer: torch.optim.Optimizer | None = None, steps: int = 4, **options: Any) -> Report:
    """Run `step(i)` for `steps` iterations with the silent checks watching, and return what they found.

    Arguments:
        step: one iteration of the user's loop (forward, loss, backward, optimizer step), given i.
        model: the model it trains (watched).
        optimizer: its optimizer, when the loop steps one.
        steps: how many iterations to run (>= 3 lets the loop checks compare steps).
        **options: session options, e.g. `silent_warmup=3`, `silent_collapse_steps=20`.

    Returns:
        The `Report` of the silent checks (zero_grad missing, kept loss graphs, train/eval mode,
        loss semantics and broadcasting, ...).

    Example:
        >>> def step(i):
        ...     loss = F.mse_loss(model(x), y); loss.backward(); opt.step()   # no zero_grad
        >>> torchtriage.check_training_loop(step, model=model, optimizer=opt).primary.code
        'silent.zero_grad_missing'
    """
    if not callable(step):
        raise TypeError(f"check_training_loop: step must be a callable step(i), got {type(step).__name__}")
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"check_training_loop: steps must be a positive int, got {steps!r}")
    from .._session import Session

    with Session(model, optimizer, checks=["silent"], on_anomaly="record", report=False, **options) as s:
        for i in range(steps):
            step(i)
    return s.report
