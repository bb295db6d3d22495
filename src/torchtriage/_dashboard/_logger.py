"""`DashboardLogger`: a check that reports nothing and writes what the session measured.

Per step, every numeric series the session records (the sentinel's `loss` and `grad_norm`;
other checks' series such as anomaly scores are picked up by name) plus the learning rate of
each watched optimizer's parameter groups, under `torchtriage/<name>`. At the end, the report
as text and one `torchtriage/anomaly` marker (1.0) at the step of each error / warning.

Cost: the values are Python numbers the sentinel already read (its one host read per step);
the learning rate is read from `param_groups` (a tensor lr is read only when it lives on the
CPU, never from an accelerator). Only rank 0 of a process group writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from .._checker import Checker
from .._findings import Report, Severity

PREFIX = "torchtriage/"


class Sink(Protocol):
    def scalars(self, step: int, values: dict[str, float]) -> None: ...

    def report(self, report: Report, markers: dict[int, float]) -> None: ...

    def close(self) -> None: ...


def _rank_zero() -> bool:
    dist = torch.distributed
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def _lr_value(lr: Any) -> float | None:
    if isinstance(lr, torch.Tensor):
        if lr.device.type != "cpu" or lr.numel() != 1:
            return None  # reading it would sync an accelerator stream
        return float(lr.item())
    if isinstance(lr, (int, float)) and not isinstance(lr, bool):
        return float(lr)
    return None


class DashboardLogger(Checker):
    """Writes the session's per-step series, learning rates and findings to one sink.

    `open_sink` is called when the session starts (a writer or run is created only for a
    session that runs, and only on rank 0)."""

    name = "dashboard"

    def __init__(self, open_sink: Callable[[], Sink]) -> None:
        super().__init__()
        self._open_sink = open_sink
        self.sink: Sink | None = None
        self._written: dict[str, int] = {}
        self._lr: dict[int, dict[str, float]] = {}

    def on_start(self, session: Any) -> None:
        if _rank_zero():
            self.sink = self._open_sink()

    def on_step_end(self, step: int) -> None:
        if self.sink is not None:
            self._remember_lr(step)
            self._flush()

    def on_end(self) -> None:
        if self.sink is None:
            return
        try:
            self._flush()
            report = self.session.report  # type: ignore[union-attr]
            markers = {f.step: 1.0 for f in report.findings
                       if f.severity is not Severity.INFO and f.step is not None}
            self.sink.report(report, markers)
        finally:
            self.sink.close()
            self.sink = None

    def _remember_lr(self, step: int) -> None:
        opts = self.session.optimizers  # type: ignore[union-attr]
        lrs: dict[str, float] = {}
        for i, opt in enumerate(opts):
            for j, group in enumerate(opt.param_groups):
                value = _lr_value(group.get("lr"))
                if value is None:
                    continue
                if len(opts) == 1 and len(opt.param_groups) == 1:
                    key = "lr"
                else:
                    key = f"lr/optimizer{i}" + (f"/group{j}" if len(opt.param_groups) > 1 else "")
                lrs[key] = value
        if lrs:
            self._lr[step] = lrs

    def _flush(self) -> None:
        health = self.session.health  # type: ignore[union-attr]
        rows: dict[int, dict[str, float]] = {}
        for name in health.names():
            if name == "lr" or name.startswith("lr["):
                continue  # the dynamics check's lr series: the learning rates are written below
            # Only the points recorded since the last flush (issue 19: the store is bounded and
            # each point carries its step).
            for step, v in health.since(name, self._written.get(name, 0)):
                # Non-finite values are written too: the NaN step is what the user looks for.
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    rows.setdefault(step, {})[PREFIX + name] = float(v)
            self._written[name] = health.count(name)
        for step, lrs in self._lr.items():
            rows.setdefault(step, {}).update({PREFIX + k: v for k, v in lrs.items()})
        self._lr.clear()
        for step in sorted(rows):
            self.sink.scalars(step, rows[step])  # type: ignore[union-attr]
