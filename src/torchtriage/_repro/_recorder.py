"""`ReproRecorder`: writes one repro bundle at the first failure of a watched run.

Inert unless `session.options["bundle_dir"]` is set (`watch(..., bundle_dir=DIR)`,
`torchtriage run --bundle DIR`). Then it asks the session to keep the state at each step's
start (`keep_state`), remembers the step's loss targets (they are not model inputs), and at
the first failure writes the bundle:

  * an exception raised by the watched code (always a trigger), or
  * a new finding at or above `bundle_severity` (default "error"), looked for after every
    event where another check may have added one: `on_optimizer_step_pre` (the non-finite
    sentinel reports there, before the update, and runs before this check), `on_step_end`,
    `on_exception` and `on_end`.

Parts are added in order of need (batch and RNG, model state, optimizer state) while they
fit `max_bundle_mb`; a part that does not fit is left out and named in meta.json and on
stderr, so a replay knows it must rebuild that part from the user's code.

Inert, or once its bundle is written, it sits every step out (`wants_step`): no per-step cost.
"""

from __future__ import annotations

import datetime
import os
import sys
import traceback
import types
from typing import Any

import torch

from .. import _registry
from .._catalogue import msg
from .._checker import Checker, LossCall
from .._findings import Finding, Severity
from .._frames import is_our_file, iter_tb, user_frame_from_tb
from .._params import model_device
from ._bundle import FORMAT, write_files
from ._safetensors import nbytes, supported
from ._tree import encode

_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}
_MAX_LOSSES = 8
_MB = 1024 * 1024  # --max-bundle-mb counts MiB


class ReproRecorder(Checker):
    """Writes a repro bundle at the first failure (only when `bundle_dir` is set)."""

    name = "repro"

    def __init__(self) -> None:
        super().__init__()
        self.active = False
        self.written: str | None = None
        self._seen = 0
        self._losses: list[LossCall] = []

    # ------------------------------------------------------------------ events
    def wants_step(self, step: int) -> bool:
        return self.active and self.written is None

    def on_start(self, session: Any) -> None:
        opts = session.options
        if not opts.get("bundle_dir"):
            return
        self.active = True
        opts["keep_state"] = True
        self._dir = os.path.abspath(os.fspath(opts["bundle_dir"]))
        self._limit = int(float(opts.get("max_bundle_mb", 512)) * _MB)
        self._threshold = _RANK[Severity(opts.get("bundle_severity", "error"))]
        keeper = session.checker("snapshot")
        if keeper is not None:  # the step tape on at every step: the bundle stores the whole step
            keeper.hold_tape(1 << 62)

    def on_step_begin(self, step: int) -> None:
        if self.active:
            self._losses = []

    def on_loss(self, call: LossCall) -> None:
        if self.active and self.written is None and len(self._losses) < _MAX_LOSSES:
            self._losses.append(call)

    def on_optimizer_step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        self._check_findings()

    def on_step_end(self, step: int) -> None:
        self._check_findings()

    def on_exception(self, exc: BaseException) -> None:
        if not self.active or self.written is not None:
            return
        tb = "".join(traceback.format_exception(type(exc), exc, _trim(exc.__traceback__)))
        trigger: dict[str, Any] = {"kind": "exception", "type": type(exc).__name__, "message": str(exc)[:2000]}
        frame = user_frame_from_tb(exc.__traceback__)
        if frame is not None:
            trigger.update(file=frame.file, line=frame.line)
        primary = self.session.report.primary if self.session is not None else None
        if primary is not None:
            trigger["finding"] = primary.to_dict()
        self._write(trigger, tb, exc)

    def on_end(self) -> None:
        self._check_findings()

    # ------------------------------------------------------------------ trigger
    def _check_findings(self) -> None:
        if not self.active or self.written is not None or self.session is None:
            return
        new: Finding | None = None
        for f in self.session.findings:  # insertion order == detection order
            if f.order > self._seen and _RANK[f.severity] >= self._threshold and new is None:
                new = f
            self._seen = max(self._seen, f.order)
        if new is None:
            return
        where = f"{new.file}:{new.line}" if new.file else "(no user line)"
        stack = "".join(traceback.format_stack()[:-3])
        tb = f"finding {new.code} at {where}: {new.message}\n\ndetected at:\n{stack}"
        trigger = {"kind": "finding", "finding": new.to_dict(), **_signature(new)}
        self._write(trigger, tb, None)

    # ------------------------------------------------------------------ capture + write
    def _write(self, trigger: dict[str, Any], tb: str, exc: BaseException | None) -> None:
        sess = self.session
        assert sess is not None
        self.written = self._dir  # once, even if writing fails below
        try:
            size, skipped = self._capture_and_write(sess, trigger, tb, exc)
        except OSError as e:
            print(msg("repro.write_failed", path=self._dir, error=str(e)), file=sys.stderr)
            self.written = None
            self.active = False
            return
        for s in skipped:
            print(msg("repro.skipped", **s), file=sys.stderr)
        what = trigger.get("code") or trigger.get("type")
        print(msg("repro.written", path=self._dir, what=what, step=trigger["step"],
                  mb=f"{size / _MB:.3g}"), file=sys.stderr)

    def _capture_and_write(self, sess: Any, trigger: dict[str, Any], tb: str,
                           exc: BaseException | None) -> tuple[int, list[dict[str, Any]]]:
        from .._env import collect_env, format_env

        snap = sess.snapshot
        trigger["step"] = snap.step if snap is not None else sess.step
        found = trigger.get("finding") or {}
        trigger["stage"] = found.get("stage") or (str(sess.stage) if sess.stage is not None else None)
        model, label = (snap.model, snap.model_label) if snap is not None else (None, None)
        args, kwargs = (snap.args, snap.kwargs) if snap is not None else ((), {})
        if model is None and exc is not None:
            model, label, args, kwargs = _batch_from_traceback(sess, exc)
        budget = _Budget(self._limit)
        unsupported: list[str] = []
        groups: dict[str, dict[str, torch.Tensor]] = {}
        meta = _header(sess, trigger)
        # RNG and batch first: without them nothing can be replayed.
        rng = _rng(snap)
        batch_t: dict[str, torch.Tensor] = {}
        batch_spec: dict[str, Any] = {}
        if model is not None:
            batch_spec = self._batch_spec(sess, snap, args, kwargs, batch_t, unsupported)
            meta["model"] = {"label": label, "class": type(model).__name__, "training": model.training,
                             "device": str(model_device(model))}
            from ._program import encode_step

            program = encode_step(sess, snap, batch_t)  # every model call, the loss code, backward
            if program is not None:
                batch_spec["step"] = program
        if budget.fits("rng", rng) and rng:
            groups["rng.safetensors"] = rng
        if batch_spec and budget.fits("batch", batch_t):
            groups["batch.safetensors"] = batch_t
            meta["batch"] = batch_spec
        model_t, models_meta = _model_states(sess, snap, unsupported)
        if model_t and budget.fits("model", model_t):
            groups["model.safetensors"] = model_t
            meta["models"] = models_meta
        opt_t, opts_meta = _optimizer_states(sess, snap, unsupported)
        if opts_meta and budget.fits("optimizer", opt_t):
            groups["optimizer.safetensors"] = opt_t
            meta["optimizers"] = opts_meta
        meta["skipped"] = budget.skipped
        meta["unsupported"] = unsupported
        env = collect_env()
        size = write_files(
            self._dir,
            jsons={"meta.json": meta, "env.json": env, "report.json": sess.report.to_dict()},
            texts={"env.txt": format_env(env), "traceback.txt": tb},
            tensors=groups)
        return size, budget.skipped

    def _batch_spec(self, sess: Any, snap: Any, args: Any, kwargs: Any, batch_t: dict[str, torch.Tensor],
                    unsupported: list[str]) -> dict[str, Any]:
        """The step's batch, its recorded loss calls and its other inputs (tensors into `batch_t`)."""
        return {"args": encode(tuple(args), "args", batch_t, unsupported),
                "kwargs": encode(dict(kwargs), "kwargs", batch_t, unsupported),
                "losses": [_loss_spec(i, c, batch_t, unsupported) for i, c in enumerate(self._losses)],
                "inputs": _step_inputs(sess, snap, (args, kwargs, [(c.target, c.args, c.kwargs)
                                                                    for c in self._losses]),
                                       batch_t, unsupported)}


class _Budget:
    """The bundle's size cap: a part that does not fit is skipped (and said so), not truncated."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.skipped: list[dict[str, Any]] = []

    def fits(self, part: str, tensors: dict[str, torch.Tensor]) -> bool:
        need = sum(nbytes(t) for t in tensors.values())
        if self.used + need > self.limit:
            self.skipped.append({"part": part, "mb": f"{need / _MB:.3g}", "limit": f"{self.limit / _MB:.3g}"})
            return False
        self.used += need
        return True


def _header(sess: Any, trigger: dict[str, Any]) -> dict[str, Any]:
    """meta.json's run facts: format, time, command line, trigger, checks (and the rank)."""
    meta: dict[str, Any] = {
        "format": FORMAT,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": {"argv": list(sess.options.get("argv") or sys.argv), "executable": sys.executable,
                    "cwd": os.getcwd(), "script": sess.options.get("script")},
        "trigger": trigger,
        "checks": [c.name for c in sess.checkers if c.name in _registry.CHECKS and c.name != "repro"],
        "custom_checks": [type(c).__name__ for c in sess.checkers
                          if c.name not in _registry.CHECKS and c.name != "snapshot"],
    }
    if sess.meta.get("distributed"):  # one rank of several (issue 15)
        meta["distributed"] = sess.meta["distributed"]
    return meta


def _rng(snap: Any) -> dict[str, torch.Tensor]:
    """The RNG states at the step's start."""
    rng: dict[str, torch.Tensor] = {}
    if snap is not None:
        rng["cpu"] = snap.rng_cpu
        for i, s in enumerate(snap.rng_cuda or []):
            rng[f"cuda.{i}"] = s
    return rng


def _model_states(sess: Any, snap: Any, unsupported: list[str]) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """Model states (cloned at the step's start: the parameters *before* the failing update)."""
    states = (snap.model_states if snap is not None else None) or {}
    model_t: dict[str, torch.Tensor] = {}
    models_meta = []
    classes = {sess.model_label(m) or str(i): type(m).__name__ for i, m in enumerate(sess.models)}
    for i, (lab, sd) in enumerate(states.items()):
        prefix = f"m{i}/"
        models_meta.append({"label": lab, "class": classes.get(lab), "prefix": prefix, "keys": list(sd)})
        for k, v in sd.items():
            if supported(v):
                model_t[prefix + k] = v
            else:
                unsupported.append(f"model {lab}.{k} ({v.dtype})")
    return model_t, models_meta


def _optimizer_states(sess: Any, snap: Any,
                      unsupported: list[str]) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """Optimizer states at the step's start."""
    opt_t: dict[str, torch.Tensor] = {}
    opts_meta = []
    opt_objs = sess.optimizers
    for i, sd in enumerate((snap.optimizer_states if snap is not None else None) or []):
        cls = type(opt_objs[i]).__name__ if i < len(opt_objs) else None
        opts_meta.append({"class": cls, "state": encode(sd, f"o{i}", opt_t, unsupported)})
    return opt_t, opts_meta


def _trim(tb: types.TracebackType | None) -> types.TracebackType | None:
    """Drop torchtriage's and runpy's leading frames: the traceback starts in the user's code."""
    while tb is not None and tb.tb_next is not None:
        fn = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not (is_our_file(fn) or os.path.basename(fn) == "runpy.py" or "<frozen runpy>" in fn):
            break
        tb = tb.tb_next
    return tb


def _signature(f: Finding) -> dict[str, Any]:
    return {"category": f.category.value, "code": f.code, "module": f.module, "op": f.op}


def _loss_spec(i: int, c: LossCall, tensors: dict[str, torch.Tensor], unsupported: list[str]) -> dict[str, Any]:
    shape = list(c.input.shape) if isinstance(c.input, torch.Tensor) else None
    return {"name": c.name, "input_shape": shape,
            "target": encode(c.target, f"loss{i}.target", tensors, unsupported),
            "args": encode(tuple(c.args[2:]), f"loss{i}.args", tensors, unsupported),
            "kwargs": encode({k: v for k, v in c.kwargs.items() if k not in ("input", "target")},
                                   f"loss{i}.kwargs", tensors, unsupported)}


def _batch_from_traceback(sess: Any, exc: BaseException) -> tuple[Any, Any, tuple[Any, ...], dict[str, Any]]:
    """The root model call a forward exception escaped from: the outermost frame of
    `Module._call_impl` whose `self` is a watched model holds its args and kwargs (the
    snapshot has no batch because the forward never returned)."""
    roots = {id(m): m for m in sess.models}
    for f, _ in iter_tb(exc.__traceback__):
        if f.f_code.co_name in ("_call_impl", "_wrapped_call_impl"):
            obj = f.f_locals.get("self")
            if obj is not None and id(obj) in roots:
                return obj, sess.model_label(obj), tuple(f.f_locals.get("args", ())), dict(f.f_locals.get("kwargs", {}))
    return None, None, (), {}


def _step_inputs(sess: Any, snap: Any, batch: Any, tensors: dict[str, torch.Tensor],
                 unsupported: list[str]) -> list[dict[str, Any]]:
    """The step's other external inputs (targets, masks, weights, second model inputs; issue 11):
    every tensor that entered the step from outside it, except the first model call's batch and
    the recorded loss calls' targets (stored already), the parameters, buffers and optimizer
    state. Stored beside the batch, so `Bundle.select` slices those that share its leading
    dimension with it."""
    if snap is None:
        return []
    from torch.utils._pytree import tree_leaves

    internal = {id(t) for t, _ in sess.param_index.tensors()}
    internal |= {id(b) for m in sess.models for b in m.buffers()}
    for opt in sess.optimizers:
        for state in opt.state.values():
            internal |= {id(v) for v in state.values() if isinstance(v, torch.Tensor)}
    internal |= {id(t) for t in tree_leaves(batch) if isinstance(t, torch.Tensor)}
    out = []
    for i, (t, where, frame) in enumerate(snap.record.external_inputs(internal)):
        out.append({"where": where, "file": frame.file if frame is not None else None,
                    "line": frame.line if frame is not None else None, "shape": list(t.shape),
                    "dtype": str(t.dtype), "tensor": encode(t.detach(), f"step.{i}", tensors, unsupported)})
    return out

