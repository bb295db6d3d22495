"""Distributed training (issue 15): torchrun, DDP, FSDP — one report, the first failing rank,
stalls explained.

    _env.py          which rank this is; `active()`, the only test a single process pays for
    _rundir.py       the run directory: JSON files the ranks exchange (works when the group is blocked)
    _collectives.py  `Tracker`: the collective each rank last entered, with the user's line
    _ddp.py          DDP models: local (pre-all-reduce) gradient flags, parameters left unused
    _checker.py      `DistributedChecker`: the session check that ties them together
    _watchdog.py     the stall watchdog thread: stacks of every rank, one finding, a clean exit
    _merge.py        the ranks' records -> one `Report`
    _branch.py       the `if` on the rank around a collective (rank-dependent control flow)

`unused_parameters(session)` is the small public hook the exception triage can call to explain
DDP's "Expected to have finished reduction in the prior iteration" with parameter names.
"""

from __future__ import annotations

from typing import Any

from ._env import active as active


def unused_parameters(session: Any) -> list[str]:
    """The parameters that received no gradient in the last reduction a DDP model expected,
    as the distributed check recorded them (empty when it did not run or saw none)."""
    checker = session.checker("distributed") if session is not None else None
    if checker is None:
        return []
    names: list[str] = []
    for f in session.report.findings:
        if f.code == "distributed.unused_parameters":
            names.extend(f.evidence.get("unused parameters", []))
    return names


def __getattr__(name: str) -> Any:
    # The checker imports the watchdog and the merge only when a session asks for it.
    if name == "DistributedChecker":
        from ._checker import DistributedChecker

        return DistributedChecker
    raise AttributeError(name)
