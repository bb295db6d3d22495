"""Deferred device flags (see `torchtriage._deferred`): the silent checks queue the numbers
they need and read them together, along with the step's one read."""

from __future__ import annotations

from .._deferred import DeferredFlags as DeferredFlags
