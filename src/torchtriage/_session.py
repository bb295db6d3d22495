"""`Session` / `watch`: attach checks to a live training loop, and detach them cleanly.

A session owns every hook torchtriage installs: PyTorch's global module forward hooks
(only if a check needs them), global optimizer step hooks, a wrapper around
`torch.autograd.backward` and wrappers around the `torch.nn.functional` losses. All are
removed on exit, on exceptions too. It keeps the step clock (steps = optimizer steps of the
first optimizer that steps; without an optimizer, backward calls), the current stage, the
module names, and the findings (each distinct cause once, with a count).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules import module as _module_mod
from torch.nn.modules.loss import _Loss
from torch.optim import optimizer as _optim_mod

from . import _registry
from ._catalogue import msg, set_language
from ._checker import Checker, LossCall, overrides
from ._config import OnAnomaly, parse_on_anomaly
from ._errors import AnomalyError, TriageInternalWarning
from ._findings import Finding, Report, Severity, Stage
from ._frames import user_frame_from_stack

# torch.nn.functional losses we observe; nn loss modules call these at call time too.
LOSS_FUNCTIONS = (
    "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "cross_entropy", "nll_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss",
    "gaussian_nll_loss", "soft_margin_loss", "multilabel_soft_margin_loss", "cosine_embedding_loss",
    "margin_ranking_loss", "hinge_embedding_loss", "triplet_margin_loss", "ctc_loss",
)

_active: list[Session] = []
# optimizer -> the user's line that built it (known when the session saw it being built)
_optimizer_frames: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def optimizer_frame(optimizer: Any) -> Any:
    """The user's line that created `optimizer`, when a discovering session saw it."""
    try:
        return _optimizer_frames.get(optimizer)
    except TypeError:
        return None
_RAISED = object()  # marks the forward hook call PyTorch makes when forward raised
_lock = threading.Lock()


def current_session() -> Session | None:
    """The innermost active session, if any."""
    return _active[-1] if _active else None


class Session:
    """Watches models and optimizers and collects findings. Use `watch(...)` to make one.

    Arguments:
        models: modules to watch (more are discovered when `discover=True`).
        optimizers: optimizers to watch (more are discovered when they first step).
        on_anomaly: "warn" | "raise" | "skip_step" | "record" (see `torchtriage._config`).
        checks: "default", or names / `Checker` instances (see `torchtriage._registry.CHECKS`).
        discover: also watch modules and optimizers the session was not given (used by `run`).
        report: "auto" prints the report to stderr on exit when something was found or the
            block raised; True always; False never.
        lang: language of messages ("en", "zh").
        options: extra settings read by individual checks (e.g. bundle_dir).
    """

    def __init__(
        self,
        models: nn.Module | Iterable[nn.Module] | None = None,
        optimizers: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None = None,
        *,
        on_anomaly: str | OnAnomaly | None = None,
        checks: Any = "default",
        discover: bool = False,
        report: bool | str = "auto",
        lang: str | None = None,
        **options: Any,
    ) -> None:
        if lang is not None:
            set_language(lang)
        self.on_anomaly = parse_on_anomaly(on_anomaly)
        self.discover = discover
        self.print_report = report
        self.options = options
        from ._snapshot import SnapshotKeeper, StepSnapshot

        self.checkers: list[Checker] = [SnapshotKeeper(), *_registry.build(checks)]
        self.snapshot: StepSnapshot | None = None
        for c in self.checkers:
            c.session = self
        self._models: list[weakref.ref[nn.Module]] = []
        self._labels: dict[int, str] = {}
        self._names: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
        self._roots: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
        self._optimizers: list[weakref.ref[torch.optim.Optimizer]] = []
        self._findings: dict[tuple[Any, ...], Finding] = {}
        self._order = itertools.count(1)
        self._warned: set[tuple[Any, ...]] = set()
        self._broken: set[str] = set()
        self._listened: list[Checker] | None = None
        self._n_listened = 0
        self._listeners_cache: dict[str, list[Checker]] = {}
        self._handles: list[Any] = []
        self._patches: list[tuple[Any, str, Any]] = []
        self._depth = 0
        self._busy = 0
        self._entered = False
        self._adopted_by: Session | None = None
        self.step = 0
        self.stage: Stage | None = None
        self._step_open = False
        self._clock: weakref.ref[torch.optim.Optimizer] | None = None
        self._backward_calls = 0
        self._pending_end = False
        self._in_backward = 0
        self._in_loss = 0
        self.exception: BaseException | None = None
        self.series: dict[str, list[float | None]] = {}
        self.meta: dict[str, Any] = {"torch": torch.__version__}
        self._t0 = time.time()
        self._pending_models = _as_list(models, nn.Module, "models")
        self._pending_optimizers = _as_list(optimizers, torch.optim.Optimizer, "optimizers")

    # ------------------------------------------------------------------ public surface
    @property
    def report(self) -> Report:
        """The findings so far, in priority order (empty when nothing is wrong)."""
        meta = dict(self.meta, steps=self.steps_seen)
        return Report(tuple(self._findings.values()), meta=meta,
                      series={k: list(v) for k, v in self.series.items()})

    @property
    def steps_seen(self) -> int:
        return self.step + (1 if self._step_open and self._clock is None else 0)

    @property
    def models(self) -> list[nn.Module]:
        return [m for m in (r() for r in self._models) if m is not None]

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [o for o in (r() for r in self._optimizers) if o is not None]

    def module_name(self, module: nn.Module) -> str | None:
        """The module's path as `model.named_modules()` names it, or None if not watched."""
        name = self._names.get(module)
        if name is None and self._models:
            self._reindex()
            name = self._names.get(module)
        return name

    def model_label(self, model: nn.Module) -> str | None:
        return self._roots.get(model)

    def owner(self, module: nn.Module) -> nn.Module | None:
        """The watched root model that contains `module`."""
        for m in self.models:
            if module is m or any(module is s for s in m.modules()):
                return m
        return None

    def add(self, finding: Finding) -> Finding:
        """Record a finding (once per cause) and apply the on_anomaly policy to errors."""
        if finding.step is None and self._step_open_or_started():
            finding = finding.replace(step=self.step)
        key = finding.key
        old = self._findings.get(key)
        if old is not None:
            self._findings[key] = old.replace(count=old.count + 1)
            return old
        finding = finding.replace(order=next(self._order))
        self._findings[key] = finding
        if finding.severity is not Severity.INFO:
            self._apply_policy(finding)
        return finding

    def record_series(self, name: str, value: float | None) -> None:
        """Append a per-step measurement (drawn in the HTML report)."""
        self.series.setdefault(name, []).append(value)

    def watch_model(self, model: nn.Module, label: str | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"watch() takes nn.Module models, got {type(model).__name__}")
        if model in self._roots:
            return
        label = label or type(model).__name__
        self._models.append(weakref.ref(model))
        self._roots[model] = label
        for name, sub in model.named_modules():
            self._names.setdefault(sub, name)
        # The model's layout, for the HTML report's model tree: path -> class name.
        self.meta.setdefault("models", {})[label] = {
            name: type(sub).__name__ for name, sub in model.named_modules()}
        self._emit("on_model", model, label)

    def watch_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"watch() takes torch.optim.Optimizer optimizers, got {type(optimizer).__name__}")
        if any(r() is optimizer for r in self._optimizers):
            return
        self._optimizers.append(weakref.ref(optimizer))
        self._emit("on_optimizer", optimizer)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Run code (a replay, a probe) without the session's hooks reacting to it."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1

    def checker(self, name: str) -> Checker | None:
        for c in self.checkers:
            if c.name == name:
                return c
        return None

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> Session:
        outer = current_session()
        if outer is not None and outer is not self:
            # A watch() inside `torchtriage run` (or nested watch): join the outer session.
            for m in self._pending_models:
                outer.watch_model(m)
            for o in self._pending_optimizers:
                outer.watch_optimizer(o)
            self._adopted_by = outer
            return outer
        self._entered = True
        with _lock:
            _active.append(self)
        try:
            self._install()
            self._emit("on_start", self)
            for m in self._pending_models:
                self.watch_model(m)
            for o in self._pending_optimizers:
                self.watch_optimizer(o)
        except BaseException:
            self._uninstall()
            raise
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if self._adopted_by is not None:
            return False
        try:
            if exc is not None and not isinstance(exc, (AnomalyError, KeyboardInterrupt)):
                self.handle_exception(exc)
            self.close()
        finally:
            self._uninstall()
        self._maybe_print(exc)
        return False  # the user's exception is always re-raised, unchanged

    def handle_exception(self, exc: BaseException) -> None:
        """Let the checks explain an exception raised by the watched code."""
        if self.exception is exc:
            return
        self.exception = exc
        self._emit("on_exception", exc)

    def close(self) -> None:
        """Finish the open step and let checks draw their conclusions. Idempotent."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        self._pending_end = False
        if self._clock is not None and self._step_open:
            # Work after the clock's last update (a GAN's last generator step, an evaluation
            # pass) is a tail, not another training step: checks still close it, the count
            # stays the number of updates.
            self._emit("on_step_end", self.step)
            self._step_open = False
        self._end_step()
        self._emit("on_end")
        self.meta["seconds"] = round(time.time() - self._t0, 3)

    def _maybe_print(self, exc: BaseException | None) -> None:
        if self.print_report is False:
            return
        report = self.report
        if self.print_report is True or exc is not None or not report.ok:
            from .report import render_text

            print(render_text(report), file=sys.stderr)

    # ------------------------------------------------------------------ hooks
    def _install(self) -> None:
        needs = lambda event: any(overrides(c, event) for c in self.checkers)  # noqa: E731
        per_module = needs("on_forward_pre") or needs("on_forward")
        self._per_module = per_module
        # Root tracking needs pre/post hooks on every module call; with discover=False and no
        # per-module check we hook the watched roots only (see watch_model / _hook_root).
        self._handles.append(_module_mod.register_module_forward_pre_hook(self._fwd_pre))
        self._handles.append(_module_mod.register_module_forward_hook(
            self._fwd_post, with_kwargs=True, always_call=True))
        self._handles.append(_optim_mod.register_optimizer_step_pre_hook(self._opt_pre))
        self._handles.append(_optim_mod.register_optimizer_step_post_hook(self._opt_post))
        self._patch(torch.autograd, "backward", self._wrap_backward(torch.autograd.backward))
        if self.discover:
            self._patch(torch.optim.Optimizer, "__init__", self._wrap_optimizer_init(torch.optim.Optimizer.__init__))
        if needs("on_loss"):
            for name in LOSS_FUNCTIONS:
                fn = getattr(F, name, None)
                if fn is not None:
                    self._patch(F, name, self._wrap_loss(name, fn))

    def _uninstall(self) -> None:
        for h in self._handles:
            with contextlib.suppress(Exception):
                h.remove()
        self._handles.clear()
        for obj, attr, original in reversed(self._patches):
            setattr(obj, attr, original)
        self._patches.clear()
        with _lock:
            if self in _active:
                _active.remove(self)

    def _patch(self, obj: Any, attr: str, new: Any) -> None:
        self._patches.append((obj, attr, getattr(obj, attr)))
        setattr(obj, attr, new)

    def _listeners(self, event: str) -> list[Checker]:
        # The checkers that implement `event`, computed once per event (an _emit runs for
        # every module call; testing each checker's class each time was most of its cost).
        # Rebuilt if `self.checkers` is replaced or changes length.
        if self._listened is not self.checkers or self._n_listened != len(self.checkers):
            self._listened, self._n_listened = self.checkers, len(self.checkers)
            self._listeners_cache = {}
        found = self._listeners_cache.get(event)
        if found is None:
            found = self._listeners_cache[event] = [c for c in self.checkers if overrides(c, event)]
        return found

    def _emit(self, event: str, *args: Any) -> None:
        for c in self._listeners(event):
            if self._broken and c.name in self._broken:
                continue
            if c.session is None:
                c.session = self
            try:
                getattr(c, event)(*args)
            except AnomalyError:
                raise
            except Exception as e:  # our bug must never kill the user's training
                self._internal_error(f"{c.name}.{event}", e)

    def _internal_error(self, where: str, e: BaseException) -> None:
        if where.split(".")[0] in self._broken:
            return
        self._broken.add(where.split(".")[0])
        warnings.warn(msg("internal.warning", where=where, error=f"{type(e).__name__}: {e}"),
                      TriageInternalWarning, stacklevel=3)

    def _step_open_or_started(self) -> bool:
        return self._step_open or self.step > 0

    def _begin_step_if_needed(self) -> None:
        if self._pending_end:
            # No optimizer has stepped since the last backward: that backward closed a step.
            self._pending_end = False
            self._end_step()
        if not self._step_open:
            self._step_open = True
            self.stage = Stage.DATA
            self._emit("on_step_begin", self.step)

    def _end_step(self) -> None:
        if self._step_open:
            self._emit("on_step_end", self.step)
            self._step_open = False
            self.step += 1
        self.stage = Stage.PARAMETER

    def _reindex(self) -> None:
        for m in self.models:
            for name, sub in m.named_modules():
                self._names.setdefault(sub, name)

    def _fwd_pre(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        if self._busy or self._in_backward:
            return
        try:
            if self._depth == 0:
                if isinstance(module, _Loss) and module not in self._roots:
                    # A loss module called by the user's loop is the loss stage, not a model.
                    self._begin_step_if_needed()
                    self.stage = Stage.LOSS
                    self._depth += 1
                    return
                if module not in self._roots:
                    if self.discover and module not in self._names:
                        self.watch_model(module, _label_from_caller(module))
                    elif module not in self._names:
                        self._depth += 1
                        return
                self._begin_step_if_needed()
                self.stage = Stage.FORWARD
            self._depth += 1
            if self._per_module:
                name = self._names.get(module)
                if name is None and self._depth > 1:
                    name = self.module_name(module)
                if name is not None:
                    self._emit("on_forward_pre", module, name, args)
        except Exception as e:
            self._internal_error("session.forward_pre", e)

    def _fwd_post(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                  output: Any = _RAISED) -> None:
        if self._busy or self._in_backward:
            return
        try:
            self._depth = max(0, self._depth - 1)
            if output is _RAISED:
                # forward raised: PyTorch then calls always_call hooks as hook(module, args, None),
                # without kwargs. Keep the depth right and the stage at forward (exception triage
                # reads it); there is no output to observe.
                return
            name = self._names.get(module) if (self._per_module or self._depth == 0) else None
            if self._per_module and name is not None:
                self._emit("on_forward", module, name, args, kwargs, output)
            if self._depth == 0 and module in self._roots:
                self.stage = Stage.LOSS
                self._emit("on_root_forward", module, self._roots[module], args, kwargs, output)
        except AnomalyError:
            raise
        except Exception as e:
            self._internal_error("session.forward", e)

    def _wrap_backward(self, original: Any) -> Any:
        session = self

        @functools.wraps(original)
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # noqa: F841
            if session._busy:
                return original(tensors, *args, **kwargs)
            roots = (tensors,) if isinstance(tensors, torch.Tensor) else tuple(tensors)
            grads = args[0] if args else kwargs.get("grad_tensors")
            session._begin_step_if_needed()
            session.stage = Stage.BACKWARD
            session._emit("on_backward", roots, grads)
            # Forwards run inside backward (activation checkpointing recomputes) are not a new
            # step or stage: the forward hooks ignore them while this counter is up.
            session._in_backward += 1
            try:
                result = original(tensors, *args, **kwargs)
            finally:
                session._in_backward -= 1
            session._backward_calls += 1
            session._emit("on_backward_end", roots)
            if session._clock is None and not session._optimizers:
                # No optimizer known: this backward closes the step, unless an optimizer
                # steps before the next forward (then the optimizer is the clock).
                session._pending_end = True
            return result

        return backward

    def _wrap_loss(self, name: str, original: Any) -> Any:
        session = self

        @functools.wraps(original)
        def loss(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # noqa: F841
            if session._busy or session._in_loss:
                # _in_loss: a TorchFunctionMode on the stack (a check's tracer, the user's own)
                # re-dispatches F.<loss> to this wrapper from inside the first call: one call.
                return original(*args, **kwargs)
            prev = session.stage
            session.stage = Stage.LOSS
            session._in_loss += 1
            try:
                out = original(*args, **kwargs)
            finally:
                session._in_loss -= 1
            try:
                inp = args[0] if args else kwargs.get("input")
                tgt = args[1] if len(args) > 1 else kwargs.get("target")
                call = LossCall(name=name, input=inp, target=tgt, args=args, kwargs=kwargs,
                                output=out, frame=user_frame_from_stack(2), module=_loss_module_name(session))
                session._emit("on_loss", call)
            except AnomalyError:
                raise
            except Exception as e:
                session._internal_error("session.loss", e)
            session.stage = prev if prev in (Stage.FORWARD, Stage.BACKWARD) else Stage.LOSS
            return out

        return loss

    def _wrap_optimizer_init(self, original: Any) -> Any:
        session = self

        @functools.wraps(original)
        def __init__(opt: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
            original(opt, *args, **kwargs)
            if not session._busy:
                try:
                    frame = user_frame_from_stack(2)
                    if frame is not None:
                        _optimizer_frames[opt] = frame
                    session.watch_optimizer(opt)
                except Exception as e:
                    session._internal_error("session.optimizer_init", e)

        return __init__

    def _known_optimizer(self, optimizer: torch.optim.Optimizer) -> bool:
        if any(r() is optimizer for r in self._optimizers):
            return True
        if self.discover:
            self.watch_optimizer(optimizer)
            return True
        return False

    def _opt_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._busy or not self._known_optimizer(optimizer):
            return None
        if self._clock is None:
            self._clock = weakref.ref(optimizer)
        self._pending_end = False
        self._begin_step_if_needed()
        # torch passes the hook step()'s own args, `self` first.
        at = 1 if args and args[0] is optimizer else 0
        closure = kwargs.get("closure", args[at] if len(args) > at else None)
        if callable(closure):
            # A closure-driven step (Lightning's default precision, LBFGS) runs forward and
            # backward inside step(): announce the optimizer stage once the closure has run.
            wrapped = self._wrap_closure(optimizer, closure)
            if "closure" in kwargs:
                return args, {**kwargs, "closure": wrapped}
            return (*args[:at], wrapped, *args[at + 1:]), kwargs
        self.stage = Stage.OPTIMIZER
        self._emit("on_optimizer_step_pre", optimizer)
        return None

    def _wrap_closure(self, optimizer: torch.optim.Optimizer, closure: Any) -> Any:
        session = self
        announced: list[bool] = []

        @functools.wraps(closure)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # noqa: F841
            result = closure(*args, **kwargs)
            if not announced and not session._busy:  # LBFGS calls it several times per step
                announced.append(True)
                session.stage = Stage.OPTIMIZER
                session._emit("on_optimizer_step_pre", optimizer)
            return result

        return wrapped

    def _opt_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._busy or not self._known_optimizer(optimizer):
            return
        self._emit("on_optimizer_step_post", optimizer)
        clock = self._clock() if self._clock is not None else None
        if clock is optimizer:
            self._end_step()

    def _apply_policy(self, finding: Finding) -> None:
        policy = self.on_anomaly
        if policy is OnAnomaly.RAISE and finding.severity is Severity.ERROR:
            raise AnomalyError(finding)
        if policy is OnAnomaly.WARN and finding.key not in self._warned:
            self._warned.add(finding.key)
            where = f" [{finding.module}]" if finding.module else ""
            warnings.warn(f"torchtriage: {finding.message}{where}", TriageWarning, stacklevel=4)


class TriageWarning(UserWarning):
    """A finding reported as a warning (on_anomaly="warn")."""


TriageWarning.__module__ = "torchtriage"


def _loss_module_name(session: Session) -> str | None:
    # Called from a loss module's forward? Look one level up for `self`.
    f = sys._getframe(2)
    for _ in range(4):
        if f is None:
            break
        obj = f.f_locals.get("self")
        if isinstance(obj, nn.Module):
            return session._names.get(obj) if obj in session._names else type(obj).__name__
        f = f.f_back
    return None


def _label_from_caller(module: nn.Module) -> str:
    """The user's variable name for a model (e.g. "model"), else its class name."""
    try:
        f = user_frame_from_stack_raw()
        if f is not None:
            for scope in (f.f_locals, f.f_globals):
                for k, v in scope.items():
                    if v is module and not k.startswith("_"):
                        return k
    except Exception:
        pass
    return type(module).__name__


def user_frame_from_stack_raw() -> Any:
    from ._frames import is_user_file

    f = sys._getframe(1)
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            return f
        f = f.f_back
    return None


def _as_list(obj: Any, cls: type, what: str) -> list[Any]:
    if obj is None:
        return []
    if isinstance(obj, cls):
        return [obj]
    if isinstance(obj, (list, tuple, set)):
        items = list(obj)
    else:
        raise TypeError(f"{what} must be a {cls.__name__} or a list of them, got {type(obj).__name__}")
    for item in items:
        if not isinstance(item, cls):
            raise TypeError(f"{what} must be a {cls.__name__} or a list of them, got a {type(item).__name__} inside")
    return items


def watch(
    model: nn.Module | Iterable[nn.Module] | None = None,
    optimizer: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None = None,
    **options: Any,
) -> Session:
    """Watch a training loop: `with torchtriage.watch(model, optimizer) as session: ...`.

    Arguments:
        model: the model (or a list of models) to watch.
        optimizer: its optimizer(s), optional.
        **options: keyword-only settings of `Session` (on_anomaly, checks, report, lang, ...).

    Returns:
        A `Session`; after the block, `session.report` is the `Report`.

    Example:
        >>> with torchtriage.watch(model, opt, on_anomaly="record") as s:
        ...     train_one_epoch(model, opt, loader)
        >>> print(s.report)
    """
    return Session(model, optimizer, **options)
