"""Where a replay gets the user's model: `--factory MODULE:FUNCTION` or `--script SCRIPT`
(default: the script the bundle recorded, when it still exists). Shared by the replay,
shrink and make-test commands."""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from .._catalogue import msg
from ._bundle import Bundle
from ._replay import ReplayResult, replay, unpack_factory_result


@dataclasses.dataclass
class Source:
    factory: str | None = None  # "module:function"
    script: str | None = None
    checks: Any = None
    _cached: dict[str, Any] | None = None

    def load_factory(self) -> Callable[[], Any]:
        assert self.factory is not None
        module, sep, func = self.factory.partition(":")
        if not sep or not module or not func.isidentifier():
            raise ValueError(msg("repro.cli.factory_syntax", value=self.factory))
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            fn = getattr(importlib.import_module(module), func)
        except (ImportError, AttributeError) as e:
            raise ValueError(msg("repro.cli.factory_import", value=self.factory, error=str(e))) from None
        return fn

    def run(self, bundle: Bundle) -> ReplayResult:
        """Replay `bundle` once. A model built by the factory is reused across replays when
        the bundle restores its whole state (each replay loads it again), else rebuilt."""
        if self.script is not None:
            return replay(bundle, script=self.script, checks=self.checks)
        full = bundle.model_state() is not None and (
            not bundle.meta.get("optimizers") or bundle.optimizer_state(0) is not None)
        if self._cached is None or not full:
            fn = self.load_factory()
            self._cached = unpack_factory_result(fn(), self.factory or "factory")
        got = self._cached
        checks = self.checks if self.checks is not None else got.get("checks")
        return replay(bundle, got["model"], got.get("optimizer"), step_fn=got.get("step_fn"), checks=checks)


def source_from_args(args: Any, bundle: Bundle) -> Source:
    """The Source the CLI flags name; ValueError (one line) when none can be found."""
    checks = [c.strip() for c in args.checks.split(",") if c.strip()] if getattr(args, "checks", None) else None
    if args.factory:
        src = Source(factory=args.factory, checks=checks)
        src.load_factory()  # fail early, with one line
        return src
    script = args.script or bundle.meta.get("command", {}).get("script")
    if not script or not os.path.isfile(script):
        raise ValueError(msg("repro.cli.need_source", script=script))
    return Source(script=script, checks=checks)
