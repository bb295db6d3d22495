"""What a checkpoint read back into the run restored, and what the run then undid (session 16).

A restore is three promises: the weights read are the weights the model holds afterwards, the
loop goes on from where the checkpoint left it, and what was trained when it was written goes on
training. Each is broken by bookkeeping that raises nothing:

- `unchanged`: a `torch.load` returns a dict holding the model's weights (at the top or under a
  key: `ckpt['model_state_dict']`), and the next `Module.load_state_dict` loads a dict whose
  values are the model's own (a copy loop that matched no top-level key). Measured before the
  load: for up to `COMPARED` of the model's parameters the checkpoint holds by name and shape,
  the loaded dict's value equals the parameter (the load changes nothing) and the checkpoint's
  differs from it (the weights read never reach the model). Error: it trains or predicts from
  its initialization.
- `resume_reset`: a checkpoint this run wrote (or whose optimizer state it restores) is read back
  and its weights loaded (a resume); a later `torch.save` of a dict with its scalar entries writes
  a counter lower than the one restored, a counter that every earlier write of that dict raised
  (`epoch` 4 restored, 1 written). The loop restarted: the epochs already trained are trained
  again, the epoch-driven schedule starts over, and a running best that moved one way over the
  earlier writes and is written on the other side of its restored value says the best was reset
  too (the next worse epoch overwrites the best file). Warning.
- `refrozen`: `Optimizer.load_state_dict` restores a parameter's state (it was trained when the
  checkpoint was written), the optimizer then steps `MIN_STEPS` times or more while other of its
  parameters move, and this one ends the run with `requires_grad=False`, never changed since the
  restore. Warning: the resumed run froze what it had been training.

Cost: a wrapper on `torch.load` and `Optimizer.load_state_dict` (a walk of the loaded object's
first levels); at a model load that follows a `torch.load`, up to `COMPARED` tensor comparisons.
Nothing in the training step.
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from collections.abc import Mapping
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack
from ._ckptname import MIN_SAVES as MIN_NAMED
from ._ckptname import NameWatch
from ._failedload import FailedLoads
from ._finaltest import FinalTest
from ._optdropped import DroppedOptimizer

COMPARED = 16  # parameters compared at a model load
DEPTH = 3  # levels of a loaded object searched for state dicts
KEEP = 4  # torch.load results remembered (until the next training step)
MIN_STEPS = 3  # optimizer steps after a restore before a frozen parameter is judged
HISTORY = 64  # writes of one dict layout remembered


def _scalars(obj: Mapping[Any, Any]) -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for k, v in obj.items():
        if isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:
            out[k] = int(v) if isinstance(v, int) else float(v)
    return out


def _mappings(obj: Any, path: str = "", depth: int = 0) -> list[tuple[str, Mapping[Any, Any]]]:
    """The mappings holding tensors in a loaded object (itself and its nested dicts), by key path."""
    out: list[tuple[str, Mapping[Any, Any]]] = []
    if depth > DEPTH:
        return out
    if isinstance(obj, (list, tuple)):  # a model saved as a list of its parts' state dicts
        for i, v in enumerate(obj[:16]):
            out.extend(_mappings(v, f"{path}[{i}]", depth + 1))
        return out
    if not isinstance(obj, Mapping):
        return out
    if any(isinstance(v, torch.Tensor) for v in obj.values()):
        out.append((path, obj))
    for k, v in list(obj.items())[:64]:
        if isinstance(v, (Mapping, list, tuple)):
            out.extend(_mappings(v, f"{path}[{k!r}]", depth + 1))
    return out


def _match(params: Mapping[str, torch.Tensor], sd: Mapping[Any, Any]) -> dict[str, torch.Tensor]:
    """The model's parameter name -> the state dict's tensor of that name (or with a wrapper's
    prefix) and shape."""
    out: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        if not isinstance(k, str) or not isinstance(v, torch.Tensor):
            continue
        parts = k.split(".")
        for i in range(min(len(parts), 3)):
            name = ".".join(parts[i:])
            p = params.get(name)
            if p is not None:
                if tuple(p.shape) == tuple(v.shape):
                    out[name] = v
                break
    return out


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.device == b.device:
        return True
    try:
        return bool(torch.equal(a.detach(), b.detach().to(device=a.device, dtype=a.dtype)))
    except (RuntimeError, TypeError):
        return False


@dataclasses.dataclass(eq=False)
class Loaded:
    obj: Any
    path: str
    frame: UserFrame | None
    step: int
    written_here: bool  # this run wrote the file before reading it
    optimizer_restored: bool = False


@dataclasses.dataclass
class Resumed:
    path: str
    frame: UserFrame | None
    scalars: dict[str, float | int]
    judged: bool = False


@dataclasses.dataclass
class Restore:
    opt: weakref.ref[torch.optim.Optimizer]
    params: list[tuple[weakref.ref[torch.Tensor], int]]  # parameters with restored state, version then
    others: list[tuple[weakref.ref[torch.Tensor], int]]  # the optimizer's other parameters, version then
    steps: int  # the session's training steps when restored
    frame: UserFrame | None


class CheckpointWatch:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.pending: list[Loaded] = []
        self.written: set[str] = set()
        self.history: dict[frozenset[str], list[dict[str, float | int]]] = {}
        self.resumed: Resumed | None = None
        self.restored: Loaded | None = None  # the last checkpoint whose weights reached a model
        self.restores: list[Restore] = []
        self.reported: set[tuple[str, str | None, int | None]] = set()
        self.names = NameWatch()
        self.final = FinalTest(session)
        self.failed_loads = FailedLoads(session)
        self.dropped = DroppedOptimizer(session)

    # ------------------------------------------------------------------ wrappers
    def install(self) -> None:
        load = torch.load
        restore = torch.optim.Optimizer.load_state_dict
        watch = self

        def torch_load(f: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            obj = load(f, *args, **kwargs)
            if not watch.session.busy:
                try:
                    watch.loaded(obj, f)
                except Exception as e:  # our bug: the user's object is returned regardless
                    watch.session.internal_error("step_ledger.checkpoint", e)
            return obj

        def load_state_dict(self: torch.optim.Optimizer, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            try:
                out = restore(self, state_dict, *args, **kwargs)
            except Exception as exc:
                if not watch.session.busy:
                    try:
                        watch.failed_loads.raised(self, state_dict, exc)
                    except Exception as e:  # our bug: the user's exception goes on regardless
                        watch.session.internal_error("step_ledger.checkpoint", e)
                raise
            if not watch.session.busy:
                watch.failed_loads.loaded(self)
                try:
                    watch.optimizer_restored(self, state_dict)
                except Exception as e:  # our bug: the optimizer is restored regardless
                    watch.session.internal_error("step_ledger.checkpoint", e)
            return out

        torch_load.__wrapped__ = load  # type: ignore[attr-defined]
        load_state_dict.__wrapped__ = restore  # type: ignore[attr-defined]
        self.session.patch(torch, "load", torch_load)
        self.session.patch(torch.optim.Optimizer, "load_state_dict", load_state_dict)

    # ------------------------------------------------------------------ events
    def loaded(self, obj: Any, f: Any) -> None:
        if not isinstance(obj, Mapping):
            return
        path = os.path.abspath(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else ""
        self.pending = [p for p in self.pending if p.step == self.session.step][-(KEEP - 1):]
        self.pending.append(Loaded(obj, path, user_frame_from_stack(3), self.session.step, path in self.written))

    def saved(self, obj: Any, f: Any, save: Any = None) -> None:
        """`torch.save(obj, f)` (called by the `torch.save` wrapper of `_bestsave`, with its record)."""
        self.final.saved(save, isinstance(obj, torch.nn.Module) or bool(_mappings(obj)))
        if isinstance(f, (str, os.PathLike)):
            self.written.add(os.path.abspath(os.fspath(f)))
            self.names.saved(os.fspath(f), 1)
        if not isinstance(obj, Mapping):
            return
        values = _scalars(obj)
        if not values:
            return
        layout = frozenset(values)
        r = self.resumed
        if r is not None and not r.judged and len(layout & set(r.scalars)) * 2 >= len(r.scalars):
            r.judged = True
            self._judge_resume(r, values, self.history.get(layout, []))
        hist = self.history.setdefault(layout, [])
        self.dropped.saved(values, hist)
        if len(hist) < HISTORY:
            hist.append(values)

    def stepped(self, opt: torch.optim.Optimizer) -> None:
        self.failed_loads.stepped(opt)
        self.dropped.stepped(opt)
        if self.pending and self.pending[-1].step != self.session.step:
            self.pending = []  # (a training step: the objects read before are not kept alive)
        if self.restored is not None and self.restored.step != self.session.step:
            self.restored = None

    def optimizer_restored(self, opt: torch.optim.Optimizer, state_dict: Any) -> None:
        for ld in [*self.pending, *([self.restored] if self.restored is not None else [])]:
            if not ld.optimizer_restored and any(m is state_dict for _, m in _nested(ld.obj)):
                ld.optimizer_restored = True
                if ld is self.restored:
                    self._restored(ld)
        params: list[tuple[weakref.ref[torch.Tensor], int]] = []
        others: list[tuple[weakref.ref[torch.Tensor], int]] = []
        for g in opt.param_groups:
            for p in g["params"]:
                if isinstance(p, torch.Tensor):
                    (params if opt.state.get(p) else others).append((weakref.ref(p), p._version))
        if params:
            self.restores.append(Restore(weakref.ref(opt), params, others, self.session.step,
                                         user_frame_from_stack(3)))
            del self.restores[:-8]

    def module_load(self, module: torch.nn.Module, state_dict: Mapping[str, Any]) -> None:
        """Before an outermost `Module.load_state_dict(state_dict)`: does it take the weights a
        `torch.load` of this step just read?"""
        self.final.module_loaded()
        self.pending = [p for p in self.pending if p.step == self.session.step]
        if not self.pending:
            return
        params = dict(module.named_parameters())
        if not params:
            return
        given = {id(v) for v in state_dict.values() if isinstance(v, torch.Tensor)}
        for ld in reversed(self.pending):
            for key, sd in _mappings(ld.obj):
                matched = _match(params, sd)
                if not matched or len(matched) * 2 < len(params):
                    continue
                if any(id(v) in given for v in matched.values()):
                    self._restored(ld, user_frame_from_stack(3))  # the checkpoint's own tensors are loaded
                    return
                names = list(matched)[:COMPARED]
                unchanged = takes = differs = 0
                for name in names:
                    p, c, v = params[name], matched[name], state_dict.get(name)
                    if isinstance(v, torch.Tensor) and _same(p, v):
                        unchanged += 1
                    if _same(p, c) or (isinstance(v, torch.Tensor) and _same(v, c)):
                        takes += 1
                    else:
                        differs += 1
                if takes:
                    self._restored(ld, user_frame_from_stack(3))
                    return
                if unchanged == len(names) and differs == len(names):
                    self._unchanged(module, ld, key, len(matched), len(params), len(names))
                    return

    def _restored(self, ld: Loaded, frame: UserFrame | None = None) -> None:
        # its weights reached a model: not judged again for another one
        self.pending = [p for p in self.pending if p is not ld]
        self.restored = ld
        if ld.written_here or ld.optimizer_restored:
            self.resumed = Resumed(ld.path, ld.frame, _scalars(ld.obj))
            self.dropped.restored(ld, frame, self.resumed.scalars)

    # ------------------------------------------------------------------ judging
    def _unchanged(self, module: torch.nn.Module, ld: Loaded, key: str, held: int, total: int,
                   compared: int) -> None:
        frame = user_frame_from_stack(4)
        mark = ("unchanged", frame.file if frame else None, frame.line if frame else None)
        if mark in self.reported:
            return
        self.reported.add(mark)
        name = type(module).__name__
        keys = [k for k in ld.obj if isinstance(k, str)][:6] if isinstance(ld.obj, Mapping) else []
        where = f"under {key}" if key else "at its top level"
        fields = {"model": name, "file": os.path.basename(ld.path) or "?", "where": where, "held": held,
                  "total": total, "compared": compared,
                  "read": f"{os.path.basename(ld.frame.file)}:{ld.frame.line}" if ld.frame else "?"}
        evidence = {"checkpoint": ld.path, "read_at": f"{ld.frame.file}:{ld.frame.line}" if ld.frame else None,
                    "state_dict_in_checkpoint": key or "(top level)", "checkpoint_top_level_keys": keys,
                    "parameters": total, "parameters_in_checkpoint": held, "compared": compared,
                    "changed_by_the_load": 0, "equal_to_checkpoint_after_load": 0}
        self.session.add(from_catalogue(Category.OTHER, "checkpoint.not_loaded", "loads.not_loaded.unchanged",
                                        fields=fields, cause_key="loads.not_loaded.cause.unchanged",
                                        next_key="loads.not_loaded.next.unchanged", frame=frame,
                                        evidence=evidence, source_line=True, severity=Severity.ERROR,
                                        stage=Stage.PARAMETER, module=name, op="load_state_dict"))

    def _judge_resume(self, r: Resumed, values: dict[str, float | int], hist: list[dict[str, float | int]]) -> None:
        if len(hist) < 2:
            return
        reset = []
        for k, v0 in r.scalars.items():
            v = values.get(k)
            if not isinstance(v0, int) or not isinstance(v, int) or v >= v0:
                continue
            series = [h[k] for h in hist if k in h]
            if len(series) >= 2 and all(b > a for a, b in zip(series, series[1:])):
                reset.append((k, v0, v))
        if not reset:
            return
        bests = []
        for k, v0 in r.scalars.items():
            v = values.get(k)
            if not isinstance(v0, float) or not isinstance(v, float) or v == v0:
                continue
            series = [h[k] for h in hist if k in h]
            up = all(b >= a for a, b in zip(series, series[1:])) and series[-1] > series[0]
            down = all(b <= a for a, b in zip(series, series[1:])) and series[-1] < series[0]
            if (up and v < v0) or (down and v > v0):
                bests.append((k, v0, v))
        k, v0, v = reset[0]
        fields = {"key": k, "restored": v0, "written": v, "file": os.path.basename(r.path) or "?",
                  "best": "; ".join(f"'{b}' {b0:g} restored, {b1:g} written" for b, b0, b1 in bests) or "-"}
        evidence = {"checkpoint": r.path, "counters_reset": [{"key": a, "restored": b, "written_after_resume": c}
                                                              for a, b, c in reset],
                    "best_values_reset": [{"key": a, "restored": b, "written_after_resume": c}
                                          for a, b, c in bests],
                    "earlier_writes": len(hist), "saved_at": None}
        save = user_frame_from_stack(3)
        if save is not None:
            evidence["saved_at"] = f"{save.file}:{save.line}"
        variant = "best" if bests else "counter"
        self.session.add(from_catalogue(Category.OTHER, "other.checkpoint_resume_reset", f"ckpt.resume_reset.{variant}",
                                        fields=fields, cause_key="ckpt.resume_reset.cause",
                                        next_key="ckpt.resume_reset.next", frame=r.frame, evidence=evidence,
                                        source_line=True, severity=Severity.WARNING, stage=Stage.OPTIMIZER,
                                        step=self.session.step))

    def end(self) -> list[Finding]:
        out: list[Finding] = self._names() + self.final.end() + self.failed_loads.end() + self.dropped.end()
        for rs in self.restores:
            opt = rs.opt()
            if opt is None or self.session.step - rs.steps < MIN_STEPS:
                continue
            frozen: list[torch.Tensor] = []
            moved = 0
            for i, (ref, v0) in enumerate(rs.params + rs.others):
                p = ref()
                if p is None:
                    continue
                if p._version != v0:
                    moved += 1
                elif not p.requires_grad and i < len(rs.params):
                    frozen.append(p)
            if not frozen or not moved:
                continue
            ids = {id(p) for p in frozen}
            names: list[str] = []
            for m in self.session.models:
                if isinstance(m, torch.nn.Module):
                    names.extend(n for n, p in m.named_parameters() if id(p) in ids)
            if not names:
                continue
            steps = self.session.step - rs.steps
            fields = {"count": len(frozen), "first": names[0], "steps": steps,
                      "values": sum(p.numel() for p in frozen), "optimizer": type(opt).__name__}
            evidence = {"parameters": names[:10], "count": len(frozen), "values": fields["values"],
                        "optimizer_state_restored": True, "steps_after_restore": steps,
                        "requires_grad_at_end": False, "changed_after_restore": False,
                        "restored_at": f"{rs.frame.file}:{rs.frame.line}" if rs.frame else None}
            out.append(from_catalogue(Category.GRADIENT, "gradient.resume_refrozen", "ckpt.refrozen",
                                      fields=fields, cause_key="ckpt.refrozen.cause", next_key="ckpt.refrozen.next",
                                      frame=rs.frame, evidence=evidence, source_line=True,
                                      severity=Severity.WARNING, stage=Stage.PARAMETER, step=self.session.step,
                                      parameter=names[0], op="load_state_dict"))
        return out


    def _names(self) -> list[Finding]:
        out = []
        for count, (a, b, ta, tb, example), frame in self.names.sites.values():
            if count < MIN_NAMED:
                continue
            fields = {"a": a, "b": b, "ta": ta, "tb": tb, "example": example, "count": count}
            evidence = {"file_name": example, "label": a, "written_after_it": ta, "value_of_" + a: tb,
                        "other_label": b, "written_after_other": tb, "value_of_" + b: ta, "saves": count}
            out.append(from_catalogue(Category.OTHER, "other.checkpoint_name_swapped", "ckpt.name_swapped",
                                      fields=fields, cause_key="ckpt.name_swapped.cause",
                                      next_key="ckpt.name_swapped.next", frame=frame, evidence=evidence,
                                      source_line=True, severity=Severity.WARNING, stage=Stage.OPTIMIZER,
                                      step=self.session.step))
        return out


def _nested(obj: Any, depth: int = 0) -> list[tuple[str, Any]]:
    """The object and its nested mappings (any content)."""
    out: list[tuple[str, Any]] = [("", obj)]
    if isinstance(obj, Mapping) and depth < DEPTH:
        for v in list(obj.values())[:64]:
            if isinstance(v, Mapping):
                out.extend(_nested(v, depth + 1))
    return out
