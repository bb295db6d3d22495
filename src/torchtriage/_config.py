"""Options shared by `watch`, `run` and the integrations, validated once.

`on_anomaly` decides what happens when a check finds an error:
    "warn"       (default) one warning per distinct finding, the run goes on;
    "raise"      raise `AnomalyError` at the point of detection;
    "skip_step"  keep the optimizer from applying a non-finite update, then go on;
    "record"     only record; read `session.report` afterwards.
The environment variable TORCHTRIAGE_ON_ANOMALY overrides the default (not an explicit value).
"""

from __future__ import annotations

import enum
import os

from ._errors import ConfigError


class OnAnomaly(str, enum.Enum):
    WARN = "warn"
    RAISE = "raise"
    SKIP_STEP = "skip_step"
    RECORD = "record"


def parse_on_anomaly(value: str | OnAnomaly | None) -> OnAnomaly:
    if value is None:
        env = os.environ.get("TORCHTRIAGE_ON_ANOMALY")
        if env is None:
            return OnAnomaly.WARN
        value, source = env, "TORCHTRIAGE_ON_ANOMALY"
    else:
        source = "on_anomaly"
    try:
        return OnAnomaly(value)
    except ValueError:
        accepted = ", ".join(repr(v.value) for v in OnAnomaly)
        raise ConfigError(f"{source}={value!r} is not valid; accepted: {accepted}") from None


def parse_late_read(value: object) -> bool:
    """`late_read=`: read the non-finite flags one step late (True) or before the update (False)."""
    if not isinstance(value, bool):
        from ._catalogue import msg

        raise ConfigError(msg("late.bad_option", given=value))
    return value
