"""A `load_state_dict` that restores a `state_dict()` taken earlier by reference (session 10).

`Module.state_dict()` returns the module's own tensors (detached views sharing their storage),
not a copy. A "best epoch" kept as `best = model.state_dict()` therefore follows every later
update, and `model.load_state_dict(best)` at the end copies the current weights onto
themselves: the restore is a no-op and the model returned is the last one, not the best.

The invariant: a load that restores weights restores *other* values than the model holds. At
every outermost `load_state_dict` the state dict's tensors are compared with the module's by
storage; when every parameter it holds is the module's own tensor, and the dict came from a
`state_dict()` call on that module after which its parameters changed (their version counters,
shared with the dict's views, grew), the snapshot was lost before the load. A load of a
snapshot that did not change since (`model.load_state_dict(model.state_dict())`) is harmless
and stays quiet; a `copy.deepcopy` / `clone()` snapshot shares no storage.

Cost: `state_dict()` calls are noted by the dict's id (its step, line and the version sum of its
tensors, at most `KEEP` of them); one pass over the keys per load. Not a hot path.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack

KEEP = 256  # state_dict() results remembered (the latest by id)


def _versions(state_dict: Mapping[str, Any]) -> int:
    return sum(v._version for v in state_dict.values() if isinstance(v, torch.Tensor))


def aliased(module: torch.nn.Module, state_dict: Mapping[str, Any]) -> tuple[int, int]:
    """(parameters of `module` the state dict holds, how many of them are the module's own storage)."""
    held = shared = 0
    for name, p in module.named_parameters():
        v = state_dict.get(name)
        if not isinstance(v, torch.Tensor) or p.numel() == 0:
            continue
        held += 1
        if v.data_ptr() == p.data_ptr() and v.shape == p.shape and v.device == p.device:
            shared += 1
    return held, shared


class Snapshots:
    """The `state_dict()` results of the session, by id: step, line, version sum when taken."""

    def __init__(self, session: Any, on_taken: Callable[[torch.nn.Module], None] | None = None) -> None:
        self.session = session
        self.on_taken = on_taken  # told of every outermost state_dict() (`_origins.Origins.taken`)
        self.depth = 0
        self.taken: collections.OrderedDict[int, tuple[int, int, UserFrame | None]] = collections.OrderedDict()
        self.reported: set[tuple[str | None, int | None]] = set()

    def install(self) -> None:
        original = torch.nn.Module.state_dict
        watch = self

        def state_dict(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            watch.depth += 1
            try:
                result = original(self, *args, **kwargs)
            finally:
                watch.depth -= 1
            if watch.depth == 0 and not watch.session.busy:
                try:
                    watch.note(result)
                    if watch.on_taken is not None:
                        watch.on_taken(self)
                except Exception as e:  # our bug: the user's state dict is returned regardless
                    watch.session.internal_error("step_ledger.state_dict", e)
            return result

        state_dict.__wrapped__ = original  # type: ignore[attr-defined]
        self.session.patch(torch.nn.Module, "state_dict", state_dict)

    def note(self, result: Any) -> None:
        if not isinstance(result, Mapping):
            return
        self.taken[id(result)] = (self.session.step, _versions(result), user_frame_from_stack(3))
        self.taken.move_to_end(id(result))
        while len(self.taken) > KEEP:
            self.taken.popitem(last=False)

    def judge(self, module: torch.nn.Module, state_dict: Mapping[str, Any]) -> Finding | None:
        """Before the load copies: the finding when `state_dict` is a stale reference snapshot."""
        entry = self.taken.get(id(state_dict))
        if entry is None:
            return None
        step, versions, taken_at = entry
        changed = _versions(state_dict) - versions
        if changed <= 0:
            return None  # the weights are those of the snapshot: the load changes nothing, and loses nothing
        if step == self.session.step:
            return None  # no training step since: the writes are the caller filling the dict in place
        held, shared = aliased(module, state_dict)
        if held == 0 or shared < held:
            return None
        frame = user_frame_from_stack(3)
        key = (frame.file if frame else None, frame.line if frame else None)
        if key in self.reported:
            return None
        self.reported.add(key)
        name = type(module).__name__
        where = f"{taken_at.file.rsplit('/', 1)[-1]}:{taken_at.line}" if taken_at is not None else "?"
        ev = {"parameters": held, "parameters_sharing_storage": shared, "snapshot_step": step,
              "load_step": self.session.step, "snapshot_line": where,
              "parameter_writes_since_snapshot": changed}
        fields = {"model": name, "n": held, "where": where, "step": step, "now": self.session.step,
                  "steps": self.session.step - step, "writes": changed}
        return from_catalogue(Category.OTHER, "checkpoint.snapshot_aliased", "selfload.aliased", fields=fields,
                              cause_key="selfload.aliased.cause", next_key="selfload.aliased.next", frame=frame,
                              evidence=ev, source_line=True, severity=Severity.WARNING, stage=Stage.PARAMETER,
                              module=name, op="load_state_dict")
