"""Errors torchtriage raises. Each carries its data as attributes.

    TriageError(RuntimeError)
    ├── AnomalyError          a finding under on_anomaly="raise"; .finding
    ├── ContractError         a tensor broke its contract; .finding, .failures
    └── BundleError           a repro bundle is unreadable, tampered or mismatched; .path
    ConfigError(ValueError)   a bad option value; names the accepted ones

`TriageWarning(UserWarning)` is a finding reported as a warning (on_anomaly="warn").
`TriageInternalWarning(RuntimeWarning)` reports a bug in torchtriage's own bookkeeping,
which is swallowed so that the user's run goes on.
"""

from __future__ import annotations

from typing import Any


class TriageError(RuntimeError):
    """Base class of torchtriage's errors."""


class AnomalyError(TriageError):
    """A finding was raised because on_anomaly="raise"."""

    def __init__(self, finding: Any) -> None:
        super().__init__(finding.message, finding)
        self.finding = finding


class ContractError(TriageError, ValueError):
    """A tensor did not meet the contract attached to it."""

    def __init__(self, message: str, finding: Any = None, failures: tuple[str, ...] = ()) -> None:
        super().__init__(message, finding, failures)
        self.finding = finding
        self.failures = failures

    def __str__(self) -> str:
        return str(self.args[0])


class BundleError(TriageError):
    """A repro bundle cannot be used as it is."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message, path)
        self.path = path

    def __str__(self) -> str:
        return str(self.args[0])


class ConfigError(ValueError):
    """An option was given a value torchtriage does not accept."""


class TriageWarning(UserWarning):
    """A finding reported as a warning (on_anomaly="warn")."""


class TriageInternalWarning(RuntimeWarning):
    """torchtriage hit a bug in its own bookkeeping and carried on."""


# What the `on_anomaly` policy raises into the user's code on purpose: an AnomalyError
# (on_anomaly="raise"), or a TriageWarning that the user's warning filters turned into an
# error (`-W error`, `simplefilter("error")`). Hooks let these through; any other exception
# inside a check is torchtriage's own bug.
POLICY_ERRORS = (AnomalyError, TriageWarning)


for _cls in (TriageError, AnomalyError, ContractError, BundleError, ConfigError, TriageWarning,
             TriageInternalWarning):
    _cls.__module__ = "torchtriage"
