"""Where the session finds its checks, by name. Imported lazily so that `import torchtriage`
stays light and a check is only loaded when a session asks for it."""

from __future__ import annotations

import importlib

from ._checker import Checker
from ._errors import ConfigError

# name -> "module:Class"; the order is the order checks see each event.
CHECKS: dict[str, str] = {
    "triage": "torchtriage._triage:ExceptionTriage",
    "nonfinite": "torchtriage._nonfinite:NonFiniteSentinel",
    "gradients": "torchtriage._gradients:GradientChecker",
    "silent": "torchtriage._silent:SilentChecker",
    "dynamics": "torchtriage._dynamics:DynamicsChecker",
    "repro": "torchtriage._repro:ReproRecorder",
    "leakage": "torchtriage._leakage._runtime:LeakageWatch",
    "data_ledger": "torchtriage._ledger:DataLedger",
    "distributed": "torchtriage._distributed._checker:DistributedChecker",
    "step_ledger": "torchtriage._ledger_step:LedgerChecker",
}

DEFAULT_CHECKS: tuple[str, ...] = ("triage", "nonfinite", "gradients", "silent", "dynamics", "repro", "leakage",
                                   "data_ledger", "step_ledger")


def available() -> list[str]:
    """Names of the checks that are installed in this build."""
    out = []
    for name in CHECKS:
        try:
            load(name)
        except ImportError:
            continue
        out.append(name)
    return out


def load(name: str) -> type[Checker]:
    if name not in CHECKS:
        raise ConfigError(f"unknown check {name!r}; accepted: {', '.join(CHECKS)}")
    module, _, cls = CHECKS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def build(checks: object) -> list[Checker]:
    """Checker instances from names and/or instances; unknown names are a ConfigError."""
    if checks is None or checks == "default":
        names: list[object] = list(DEFAULT_CHECKS)
        tolerant = True
        from ._distributed._env import active

        if active():  # one rank of several (issue 15); a single process never loads it
            names.append("distributed")
    elif isinstance(checks, (str, Checker)):
        names, tolerant = [checks], False
    else:
        names, tolerant = list(checks), False  # type: ignore[call-overload]
    out: list[Checker] = []
    for item in names:
        if isinstance(item, Checker):
            out.append(item)
            continue
        if not isinstance(item, str):
            raise ConfigError(f"checks accepts names ({', '.join(CHECKS)}) or Checker instances, got {item!r}")
        try:
            out.append(load(item)())
        except ModuleNotFoundError as e:
            # A default check whose module is not part of this build is simply absent.
            if tolerant and e.name and e.name.startswith("torchtriage."):
                continue
            raise
    return out
