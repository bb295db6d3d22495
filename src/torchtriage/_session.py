"""`Session` / `watch`: attach checks to a live training loop, and detach them cleanly.

A session owns every hook torchtriage installs (`_hooks.py`: global module forward hooks,
global optimizer step hooks, wrappers around `torch.autograd.backward` and the
`torch.nn.functional` losses); all are removed on exit, on exceptions too. It keeps the step
clock (steps = optimizer steps of the first optimizer that steps; work after its last update
is a tail, not a step; without an optimizer, backward calls), the current stage, the module
names, and the findings (each distinct cause once, with a count).
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
from typing import Any, Literal

import torch
import torch.nn as nn

from . import _registry
from ._built_at import construction_line
from ._catalogue import msg, set_language
from ._checker import LIFECYCLE_EVENTS, Checker, overrides
from ._checker import LOSS_FUNCTIONS as LOSS_FUNCTIONS
from ._config import OnAnomaly, parse_late_read, parse_on_anomaly
from ._errors import POLICY_ERRORS, AnomalyError, TriageInternalWarning, TriageWarning
from ._findings import Finding, Report, Severity, Stage
from ._frames import (
    is_user_file,
    note_optimizer_finder,
    optimizer_frame_known,
    user_files_on_stack,
    user_stacklevel,
    without_our_frames,
)
from ._hooks import SessionHooks
from ._modestack import own_modes_off

_active: list[Session] = []
_lock = threading.Lock()


def current_session() -> Session | None:
    """The innermost active session, if any."""
    return _active[-1] if _active else None


class Session(SessionHooks):
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
        options: extra settings read by individual checks (e.g. bundle_dir); `tensorboard=`
            (a log folder or a SummaryWriter) and `wandb=` (True or a run) add a dashboard
            logger (docs/frontends.md).
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
        if options.get("stall_timeout") is not None:  # distributed runs (issue 15)
            from ._distributed._env import parse_stall_timeout

            options["stall_timeout"] = parse_stall_timeout(options["stall_timeout"])
        if "late_read" in options:  # the non-finite flags read one step late (issue 16)
            options["late_read"] = parse_late_read(options["late_read"])
        if options.get("bundle_dir"):
            from ._distributed._env import active, rank_bundle_dir

            if active():  # one bundle folder per rank (issue 15)
                options["bundle_dir"] = rank_bundle_dir(options["bundle_dir"])
        self.options = options
        from ._snapshot import SnapshotKeeper, StepSnapshot

        self.checkers: list[Checker] = [SnapshotKeeper(), *_registry.build(checks)]
        if "tensorboard" in options or "wandb" in options:  # issue 18: dashboards, after the checks
            from ._dashboard import loggers_from_options

            self.checkers += loggers_from_options(options)
        self.snapshot: StepSnapshot | None = None
        for c in self.checkers:
            c.session = self
        self._models: list[weakref.ref[nn.Module]] = []
        self._names: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
        self._roots: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
        self._loss_like: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # parameterless modules fed a graph
        self._optimizers: list[weakref.ref[torch.optim.Optimizer]] = []
        self._findings: dict[tuple[Any, ...], Finding] = {}
        self._order = itertools.count(1)
        self._warned: set[tuple[Any, ...]] = set()
        self._broken: set[str] = set()
        self._listened: list[Checker] | None = None
        self._n_listened = 0
        self._listeners_cache: dict[str, list[tuple[Checker, Any]]] = {}
        self._asleep: frozenset[str] = frozenset()  # checks sitting out this step (`wants_step`)
        self._choosers: list[Checker] = []  # the checks that implement `wants_step`
        self._choosers_of: tuple[int, int] | None = None  # (of which list of checks)
        self._init_hooks()
        self._adopted_by: Session | None = None
        self.step = 0
        self.stage: Stage | None = None
        self._step_open = False
        self._clock: weakref.ref[torch.optim.Optimizer] | None = None
        self._pending_end = False
        self._closed = False
        self.exception: BaseException | None = None
        from ._series import SeriesStore

        self.health = SeriesStore()  # per-step loss, grad norm, lr, ... in bounded memory (issue 19)
        self.meta: dict[str, Any] = {"torch": torch.__version__}
        # rank / local_rank stamped on every finding in a distributed run (issue 15)
        self.rank_fields: dict[str, Any] = {}
        self._merged: Report | None = None
        self._t0 = time.time()
        self._param_index: Any = None
        self._pending_models = _as_list(models, nn.Module, "models")
        self._pending_optimizers = _as_list(optimizers, torch.optim.Optimizer, "optimizers")

    # ------------------------------------------------------------------ public surface
    @property
    def report(self) -> Report:
        """The findings so far, in priority order (empty when nothing is wrong). On rank 0 of a
        distributed run, after the block: the report merged from every rank."""
        if self._merged is not None:
            return self._merged
        meta = dict(self.meta, steps=self.steps_seen)
        thinned = self.health.decimated()
        if thinned:  # long runs: the kept points' steps, for the charts' x axis
            meta["series_steps"] = {k: [s for s, _ in self.health.points(k)] for k in thinned}
        return Report(tuple(self._findings.values()), meta=meta, series=self.series)

    @property
    def series(self) -> dict[str, list[float | None]]:
        """The per-step series' kept values, name -> list (a copy; see `health` for the steps)."""
        return {k: self.health.values(k) for k in self.health}

    def assert_ok(self) -> None:
        """`AssertionError` with the rendered report when something is wrong (see `Report.assert_ok`)."""
        __tracebackhide__ = True
        self.report.assert_ok()

    @property
    def steps_seen(self) -> int:
        return self.step + (1 if self._step_open and self._clock is None else 0)

    @property
    def models(self) -> list[nn.Module]:
        return [m for m in (r() for r in self._models) if m is not None]

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [o for o in (r() for r in self._optimizers) if o is not None]

    @property
    def param_index(self) -> Any:
        """Every parameter of the step (the watched models' and whatever the optimizers hold)
        with its name, owner and optimizer group: a `torchtriage._params.ParamIndex`."""
        if self._param_index is None:
            from ._params import ParamIndex

            self._param_index = ParamIndex(self)
        return self._param_index

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

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The findings so far in the order they were found (`report` sorts them by priority)."""
        return tuple(self._findings.values())

    @property
    def step_started(self) -> bool:
        """True once a step has begun: the current one is open, or one has closed."""
        return self._step_open or self.step > 0

    def step_skipped(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer step that never ran (GradScaler skips `optimizer.step()` on inf/NaN
        gradients) still ends the iteration: close the session's step when `optimizer` drives
        the step clock (the first optimizer that steps), so the next batch gets its own step."""
        if self._clock is None:
            self._clock = weakref.ref(optimizer)
        if self._clock() is optimizer:
            self._end_step()

    def add(self, finding: Finding) -> Finding:
        """Record a finding (once per cause) and apply the on_anomaly policy to errors."""
        if finding.step is None and self.step_started:
            # Between steps (after an update, before the next forward) a finding belongs to
            # the step that just closed: e.g. `out.grad` read right after `opt.step()`.
            finding = finding.replace(step=self.step if self._step_open else self.step - 1)
        if self.rank_fields and finding.rank is None:
            finding = finding.replace(**self.rank_fields)
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

    def revise(self, finding: Finding) -> Finding:
        """Replace the recorded finding with `finding`'s key by `finding` (its severity and evidence
        judged later, from the rest of the run: a loss that grew and then recovered); its place in
        the execution order and its count are kept. A finding not recorded yet is added."""
        old = self._findings.get(finding.key)
        if old is None:
            return self.add(finding)
        new = finding.replace(order=old.order, count=old.count, step=old.step, rank=old.rank,
                              local_rank=old.local_rank, host=old.host)
        self._findings[finding.key] = new
        return new

    def count_on(self, finding: Finding, evidence: dict[str, Any]) -> Finding:
        """Count a consequence on an earlier finding (an error that finding's NaN caused later):
        its count grows and `evidence` joins its evidence (entries it already has are kept)."""
        old = self._findings.get(finding.key, finding)
        merged = dict(old.evidence)
        for k, v in evidence.items():
            merged.setdefault(k, v)
        new = old.replace(count=old.count + 1, evidence=merged)
        self._findings[finding.key] = new
        return new

    def record_series(self, name: str, value: float | None) -> None:
        """Append a per-step measurement (drawn in the HTML report), kept in bounded memory."""
        self.health.add(name, self.step, value)

    def watch_model(self, model: nn.Module, label: str | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"watch() takes nn.Module models, got {type(model).__name__}")
        if model in self._roots:
            return
        if label is None:
            # The user's variable (G, netD, teacher: several models of one step are told
            # apart by it; issue 11), else the class name; a label already taken gets a suffix.
            from ._hooks import _label_from_caller

            label = _label_from_caller(model)
        taken = set(self._roots.values())
        base, n = label, 2
        while label in taken:
            label, n = f"{base}#{n}", n + 1
        self._models.append(weakref.ref(model))
        self._roots[model] = label
        for name, sub in model.named_modules():
            self._names.setdefault(sub, name)
        # The model's layout, for the HTML report's model tree: path -> class name.
        self.meta.setdefault("models", {})[label] = {
            name: type(sub).__name__ for name, sub in model.named_modules()}
        if self._installed:  # hook the root when in root-only mode
            self._hook_root(model)
        self._emit("on_model", model, label)

    def watch_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"watch() takes torch.optim.Optimizer optimizers, got {type(optimizer).__name__}")
        if any(r() is optimizer for r in self._optimizers):
            return
        self._optimizers.append(weakref.ref(optimizer))
        self.param_index.note_optimizer(optimizer)
        if optimizer_frame_known(optimizer) is None:
            # Built before the session: its line is read from the user's files if a finding
            # asks (the files of the user's frames now, and of the watched models' classes).
            note_optimizer_finder(optimizer, functools.partial(construction_line, names=self._labels_of(optimizer)),
                                  [*user_files_on_stack(2), *self._model_files()])
        self._emit("on_optimizer", optimizer)

    def _labels_of(self, optimizer: torch.optim.Optimizer) -> list[str]:
        """The labels (the user's variable names) of the watched models whose parameters
        `optimizer` holds."""
        held = {id(p) for g in optimizer.param_groups for p in g["params"]}
        return [label for m in self.models if (label := self.model_label(m))
                and any(id(p) in held for p in m.parameters())]

    def _model_files(self) -> list[str]:
        out = []
        for m in self.models:
            mod = sys.modules.get(type(m).__module__)
            file = getattr(mod, "__file__", None)
            if file and is_user_file(file):
                out.append(file)
        return out

    @property
    def busy(self) -> bool:
        """True while the session's hooks ignore the code that runs (a replay, a probe)."""
        return bool(self._busy)

    @property
    def in_event(self) -> bool:
        """True while a check's event handler runs: an op seen then is the checks' own, never the
        user's (a mode one check pushed in its handler sees the next checks' arithmetic)."""
        return bool(self._in_event)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Run code (a replay, a probe) without the session's hooks reacting to it."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1

    def patch(self, obj: Any, attr: str, new: Any) -> Any:
        """Replace `obj.attr` by `new` until the session exits (on exceptions too); returns a
        function that restores it sooner (used by checks that wrap library calls)."""
        return self._patches.patch(obj, attr, new)

    def internal_error(self, where: str, e: BaseException) -> None:
        """A check's own bug: warn once (TriageInternalWarning) and stop that check."""
        self._internal_error(where, e)

    def disable_check(self, name: str) -> None:
        """Stop running the check `name` for the rest of the session (one that cannot judge
        what it watches, e.g. the gradient chain of FSDP-sharded parameters)."""
        self._broken.add(name)

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
        with _lock:
            _active.append(self)
        try:
            self._install()
            self._emit("on_start", self)
            for m in self._pending_models:
                self.watch_model(m)
            for o in self._pending_optimizers:
                self.watch_optimizer(o)
            self._maybe_narrow_module_hooks()  # the checks' answer may change once optimizers are known
        except BaseException:
            self._uninstall()
            raise
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if self._adopted_by is not None:
            return False
        try:
            if exc is not None and not isinstance(exc, (*POLICY_ERRORS, KeyboardInterrupt)):
                self.handle_exception(exc)
            self.close()
        finally:
            try:
                if exc is not None:
                    # Once the checks have read it: the user's traceback as Python would show it
                    # without torchtriage (issue 10); trimmed while our hooks are still registered,
                    # which tells the torch frames they alone caused.
                    exc.__traceback__ = without_our_frames(exc.__traceback__, hooks=True)
            except Exception as e:
                self._internal_error("session.traceback", e)
            finally:
                self._uninstall()
        self._maybe_print(exc)
        return False  # the user's exception is always re-raised, unchanged

    def handle_exception(self, exc: BaseException) -> None:
        """Let the checks explain an exception raised by the watched code."""
        if self.exception is exc:
            return
        self.exception = exc
        self._emit("on_raise", exc)  # what the step measured so far, settled first
        self._emit("on_exception", exc)

    def close(self) -> None:
        """Finish the open step and let checks draw their conclusions. Idempotent."""
        if self._closed:
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

    def job_report(self) -> Report | None:
        """At the end, the job's report: this session's in a single process; in a distributed
        job, the ranks' merged report on rank 0 (each rank hands its report in; issue 15) and
        None on the other ranks."""
        report = self.report
        dist = self.checker("distributed")
        if dist is None:
            return report
        merged = dist.gather(report)  # type: ignore[attr-defined]
        if merged is not None:
            self._merged = merged
        return merged

    def _maybe_print(self, exc: BaseException | None) -> None:
        if self.print_report is False:
            return
        # One report for the job, printed once, by rank 0 (issue 15).
        report = self.job_report()
        if report is None:
            return
        if self.print_report is True or exc is not None or not report.ok:
            from .report import render_text

            print(render_text(report), file=sys.stderr)

    def _uninstall(self) -> None:
        super()._uninstall()
        with _lock:
            if self in _active:
                _active.remove(self)

    def _listeners(self, event: str) -> list[tuple[Checker, Any]]:
        # The checkers that implement `event`, with their bound method, computed once per event
        # (an _emit runs for every module call; testing each checker's class and looking the
        # method up each time was most of its cost). Rebuilt if `self.checkers` is replaced or
        # changes length.
        if self._listened is not self.checkers or self._n_listened != len(self.checkers):
            self._listened, self._n_listened = self.checkers, len(self.checkers)
            self._listeners_cache = {}
        found = self._listeners_cache.get(event)
        if found is None:
            asleep = self._asleep if event not in LIFECYCLE_EVENTS else ()
            found = self._listeners_cache[event] = [(c, getattr(c, event)) for c in self.checkers
                                                    if overrides(c, event) and c.name not in asleep]
        return found

    def _sit_out(self, step: int) -> None:
        """Ask the checks that choose their steps (`Checker.wants_step`) whether they take part
        in `step`; the event lists are rebuilt only when the answer changes."""
        key = (id(self.checkers), len(self.checkers))
        if key != self._choosers_of:
            self._choosers_of = key
            self._choosers = [c for c in self.checkers if overrides(c, "wants_step")]
        if not self._choosers and not self._asleep:
            return
        asleep = frozenset(c.name for c in self._choosers if not self._wants(c, step))
        if asleep != self._asleep:
            self._asleep = asleep
            self._listeners_cache = {}

    def _wants(self, checker: Checker, step: int) -> bool:
        """`checker.wants_step(step)`; a check whose answer raises is our bug: it warns once, the
        check is switched off, the user's step goes on."""
        if checker.name in self._broken:
            return False
        try:
            return bool(checker.wants_step(step))
        except Exception as e:
            self._internal_error(f"{checker.name}.wants_step", e)
            return False

    def _emit(self, event: str, *args: Any) -> None:
        # (the cache lookup inlined: ~10 events a step; `_listeners` rebuilds on a miss)
        listeners = self._listeners_cache.get(event) \
            if self._listened is self.checkers and self._n_listened == len(self.checkers) else None
        if listeners is None:
            listeners = self._listeners(event)
        if listeners and torch._C._len_torch_function_stack():
            # The checks' own arithmetic runs without our torch-function modes (the first steps'
            # tape and tracers): they would run their Python handlers on every op of it and
            # record none (thousands of calls a step on a small GPT).
            with own_modes_off():
                self._emit_to(listeners, event, args)
        elif listeners:
            self._emit_to(listeners, event, args)

    def _emit_to(self, listeners: list[tuple[Checker, Any]], event: str, args: tuple[Any, ...]) -> None:
        broken = self._broken
        self._in_event += 1
        try:
            for c, method in listeners:
                if broken and c.name in broken:
                    continue
                if c.session is None:
                    c.session = self
                try:
                    method(*args)
                except POLICY_ERRORS:
                    raise
                except Exception as e:  # our bug must never kill the user's training
                    self._internal_error(f"{c.name}.{event}", e)
        finally:
            self._in_event -= 1

    def _internal_error(self, where: str, e: BaseException) -> None:
        if where.split(".")[0] in self._broken:
            return
        self._broken.add(where.split(".")[0])
        warnings.warn(msg("internal.warning", where=where, error=f"{type(e).__name__}: {e}"),
                      TriageInternalWarning, stacklevel=user_stacklevel())

    def _begin_step_if_needed(self) -> None:
        if self._pending_end:
            # No optimizer has stepped since the last backward: that backward closed a step.
            self._pending_end = False
            self._end_step()
        if not self._step_open:
            self._step_open = True
            self.stage = Stage.DATA
            self._sit_out(self.step)
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

    def _apply_policy(self, finding: Finding) -> None:
        policy = self.on_anomaly
        if policy is OnAnomaly.RAISE and finding.severity is Severity.ERROR:
            raise AnomalyError(finding)
        if policy is OnAnomaly.WARN and finding.key not in self._warned:
            self._warned.add(finding.key)
            where = f" [{finding.module}]" if finding.module else ""
            warnings.warn(f"torchtriage: {finding.message}{where}", TriageWarning, stacklevel=user_stacklevel())


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
