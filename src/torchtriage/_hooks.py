"""The hooks a `Session` installs, and the wrappers it patches in; all removed on exit.

PyTorch's global module forward pre/post hooks (root discovery, depth, stage, per-module events),
global optimizer step pre/post hooks (the step clock; closure-driven steps announced after the
closure ran), a wrapper around `torch.autograd.backward` (the loss, the backward stage; forwards
recomputed inside backward are ignored), wrappers around the `torch.nn.functional` losses (the
loss call and the user's line; re-entry from a TorchFunctionMode counted once) and, when
discovering, around `Optimizer.__init__` (the line that built an optimizer). `SessionHooks` is
a mixin of `Session`: the state it reads and writes is the session's.
"""

from __future__ import annotations

import functools
import sys
import weakref
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules import module as _module_mod
from torch.nn.modules.loss import _Loss
from torch.optim import optimizer as _optim_mod
from torch.utils import _pytree as pytree

from ._checker import LOSS_FUNCTIONS, Checker, LossCall, overrides
from ._errors import POLICY_ERRORS
from ._findings import Stage
from ._frames import (
    find_frame,
    note_optimizer_frame,
    passed_through,
    released_locals,
    user_frame_from_stack,
    user_stack_frame,
)
from ._modestack import forget, put_back, set_aside
from ._patching import Patches
from ._roothook import RootHook  # pickles and deep-copies inert, with the user's model
from ._step import called_functionally
from ._transparent import HookOwner, remove_handle, standing_aside
from ._transparent import install as _install_transparency
from ._transparent import uninstall as _uninstall_transparency

if TYPE_CHECKING:
    from ._patching import Patches
    from ._session import Session


_RAISED = object()  # marks the forward hook call PyTorch makes when forward raised
DISCOVERY_STEPS = 3  # steps a discovering session keeps global module hooks to find models



def _untrainable(module: nn.Module) -> bool:
    """A module with no parameters, nor plain tensors that require grad (a model written with
    `self.w = torch.randn(..., requires_grad=True)`): a loss, a pipeline object or a transform."""
    if next(module.parameters(), None) is not None:
        return False
    return not any(isinstance(v, torch.Tensor) and v.requires_grad
                   for m in module.modules() for v in vars(m).values())


def _fed_graph(args: tuple[Any, ...]) -> bool:
    """Some argument carries an autograd graph (a model's output)."""
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in pytree.tree_leaves(args)[:16])


class SessionHooks(HookOwner):
    """Installing, removing and running the session's hooks (mixed into `Session`). The hooks'
    own state is created by `_init_hooks` (called from `Session.__init__`); the rest they read
    (checkers, the clock, the watched models and optimizers) is the session's."""

    if TYPE_CHECKING:  # what this mixin uses of `Session`, declared for the type checker only
        checkers: list[Checker]
        discover: bool
        step: int
        stage: Stage | None
        _names: weakref.WeakKeyDictionary[nn.Module, str]
        _roots: weakref.WeakKeyDictionary[nn.Module, str]
        _loss_like: weakref.WeakSet[nn.Module]
        _optimizers: list[weakref.ref[torch.optim.Optimizer]]
        _clock: weakref.ref[torch.optim.Optimizer] | None
        _broken: set[str]
        _pending_end: bool

        @property
        def models(self) -> list[nn.Module]: ...
        def module_name(self, module: nn.Module) -> str | None: ...
        def watch_model(self, model: nn.Module, label: str | None = None) -> None: ...
        def watch_optimizer(self, optimizer: torch.optim.Optimizer) -> None: ...
        def _begin_step_if_needed(self) -> None: ...
        def _end_step(self) -> None: ...
        def _emit(self, event: str, *args: Any) -> None: ...
        def _internal_error(self, where: str, e: BaseException) -> None: ...

    def _init_hooks(self) -> None:
        self._installed = False
        self._handles: list[Any] = []
        self._patches = Patches()
        self._depth = 0  # module calls in progress
        self._busy = 0  # > 0: a replay or probe runs, hooks ignore it
        self._in_event = 0  # > 0: a check's event handler runs (its ops are ours, not the user's)
        self._in_backward = 0
        self.backward_create_graph = False  # the running backward's create_graph (the silent check reads it)
        self._in_loss = 0
        # Module hooks: global ones (every module call of every model goes through PyTorch's
        # slower call path and two Python hooks) while they are needed — to discover models
        # (`run`) or while a check wants per-module events (the gradient check's first steps);
        # otherwise hooks on the watched roots only, and submodules run at full speed.
        self._module_handles: list[Any] = []
        self._root_hooked: set[int] = set()
        self._awaiting_first_step: set[int] = set()  # optimizers (ids) built, not yet stepped
        self._stepped_once: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # (the clock's successor)
        self._global_module_hooks = False
        self._per_module = False
        self._modes_aside: dict[int, list[Any]] = {}  # optimizer id -> our modes off during its step
        # optimizer id -> its steps since the clock's last one (a later phase's optimizer takes over)
        self._steps_without_clock: dict[int, int] = {}

    def _install(self) -> None:
        needs = lambda event: any(overrides(c, event) for c in self.checkers)  # noqa: E731
        self._installed = True
        self._per_module = self._wants_module_events()
        if self.discover or self._per_module:
            self._module_handles.append(_module_mod.register_module_forward_pre_hook(self._fwd_pre))
            self._module_handles.append(_module_mod.register_module_forward_hook(
                self._fwd_post, with_kwargs=True, always_call=True))
            self._global_module_hooks = True
        else:
            self._global_module_hooks = False
        self._handles.append(_optim_mod.register_optimizer_step_pre_hook(self._opt_pre))
        self._handles.append(_optim_mod.register_optimizer_step_post_hook(self._opt_post))
        self._patch(torch.autograd, "backward", self._wrap_backward(torch.autograd.backward))
        _install_transparency(cast("Session", self))  # our hooks invisible to copy / pickle / jit.script (issue 10)
        if self.discover:
            self._patch(torch.optim.Optimizer, "__init__", self._wrap_optimizer_init(torch.optim.Optimizer.__init__))
        if needs("on_loss"):
            for name in LOSS_FUNCTIONS:
                fn = getattr(F, name, None)
                if fn is not None:
                    self._patch(F, name, self._wrap_loss(name, fn))

    def _uninstall(self) -> None:
        for token in self._modes_aside.values():  # a step that raised: its owners removed theirs
            forget(token)
        self._modes_aside.clear()
        _uninstall_transparency(self)
        for h in (*self._handles, *self._module_handles):
            remove_handle(h)
        self._handles.clear()
        self._module_handles.clear()
        self._root_hooked.clear()
        self._awaiting_first_step.clear()
        self._global_module_hooks = False
        self._installed = False
        self._patches.restore_all()

    def _wants_module_events(self) -> bool:
        return any(c.wants_module_events() for c in self.checkers
                   if c.name not in self._broken and (overrides(c, "on_forward_pre") or overrides(c, "on_forward")))

    def _hook_root(self, model: nn.Module) -> None:
        """Hook one watched root (root-only mode): its calls keep the step, stage and batch."""
        if not self._installed or self._global_module_hooks or id(model) in self._root_hooked \
                or isinstance(model, torch.jit.ScriptModule):  # (takes no Python hooks: its calls go unseen)
            return
        self._root_hooked.add(id(model))
        self._module_handles.append(model.register_forward_pre_hook(RootHook(self, "_fwd_pre")))
        self._module_handles.append(model.register_forward_hook(RootHook(self, "_fwd_post"), with_kwargs=True,
                                                                always_call=True))

    def _maybe_narrow_module_hooks(self) -> None:
        """After a step (never from inside a module hook: PyTorch iterates the hook dicts):
        drop the global module hooks once nothing needs them, keeping hooks on the roots; put
        them back when a check wants its module events again.

        A discovering session (`torchtriage run`) learns models by their first top-level call:
        it narrows only after DISCOVERY_STEPS steps and while no optimizer built since is still
        waiting for its first step (its model is found by then); a model first called after
        that without an optimizer of its own is not discovered (documented limit)."""
        if not self._global_module_hooks:
            if not self._depth and self._wants_module_events():
                self._widen_module_hooks()  # a check wants them again (the gradient check's evidence step)
            return
        if self._depth or self._wants_module_events():
            return
        if self.discover and (self.step < DISCOVERY_STEPS or self._awaiting_first_step):
            return
        for h in self._module_handles:
            remove_handle(h)
        self._module_handles.clear()
        self._global_module_hooks = False
        self._per_module = False
        for m in self.models:
            self._hook_root(m)

    def _widen_module_hooks(self) -> None:
        """Back to global module hooks (a new optimizer appeared: discover its model)."""
        if self._global_module_hooks or self._depth:
            return
        for h in self._module_handles:
            remove_handle(h)
        self._module_handles.clear()
        self._root_hooked.clear()
        self._module_handles.append(_module_mod.register_module_forward_pre_hook(self._fwd_pre))
        self._module_handles.append(_module_mod.register_module_forward_hook(
            self._fwd_post, with_kwargs=True, always_call=True))
        self._global_module_hooks = True
        self._per_module = self._wants_module_events()

    def _patch(self, obj: Any, attr: str, new: Any) -> None:
        self._patches.patch(obj, attr, new)

    def _fwd_pre(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        __tracebackhide__ = True
        if self._busy or self._in_backward or standing_aside():
            return
        try:
            if self._depth == 0:
                label = self._roots.get(module)  # (one weak-dict lookup: this runs every step)
                if label is None:
                    if isinstance(module, _Loss):
                        # A loss module called by the user's loop is the loss stage, not a model.
                        self._begin_step_if_needed()
                        self.stage = Stage.LOSS
                        self._depth += 1
                        return
                    if self.discover and module not in self._names and _untrainable(module):
                        # Nothing to train: not a model to discover. Transparent (no depth), so
                        # the models it calls are found at their own call and the ops between
                        # them are the user's step code; fed a tensor that carries a graph, it
                        # is a hand-written loss module (`class FocalLoss(nn.Module)`).
                        if _fed_graph(args):
                            self._begin_step_if_needed()
                            self.stage = Stage.LOSS
                            # Watched all the same: called without a graph (an evaluation's
                            # parameterless scorer, a link predictor's dot product) it is a model.
                            self._loss_like.add(module)
                            self.watch_model(module, _label_from_caller(module))
                        return
                    if self.discover and module not in self._names and not called_functionally():
                        self.watch_model(module, _label_from_caller(module))
                        label = self._roots.get(module)
                    elif module not in self._names:
                        self._depth += 1
                        return
                elif self._loss_like and module in self._loss_like and _fed_graph(args):
                    self._begin_step_if_needed()
                    self.stage = Stage.LOSS  # a hand-written loss module again: transparent
                    return
                self._begin_step_if_needed()
                self.stage = Stage.FORWARD
                if label is not None:
                    self._emit("on_root_forward_pre", module, label)
            self._depth += 1
            if self._per_module:
                name = self._names.get(module)
                if name is None and self._depth > 1:
                    name = self.module_name(module)
                if name is not None:
                    self._emit("on_forward_pre", module, name, args)
        except POLICY_ERRORS:
            raise
        except Exception as e:
            self._internal_error("session.forward_pre", e)

    def _fwd_post(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                  output: Any = _RAISED) -> None:
        __tracebackhide__ = True
        if self._busy or self._in_backward or standing_aside():
            return
        try:
            self._depth = max(0, self._depth - 1)
            if output is _RAISED:
                # forward raised: PyTorch then calls always_call hooks as hook(module, args, None),
                # without kwargs. Keep the depth right and the stage at forward (exception triage
                # reads it); there is no output to observe.
                return
            if self._per_module:
                name = self._names.get(module)
                if name is not None:
                    self._emit("on_forward", module, name, args, kwargs, output)
            if self._depth == 0:
                label = self._roots.get(module)
                if label is not None and not (self._loss_like and module in self._loss_like and _fed_graph(args)):
                    self.stage = Stage.LOSS
                    self._emit("on_root_forward", module, label, args, kwargs, output)
        except POLICY_ERRORS:
            raise
        except Exception as e:
            self._internal_error("session.forward", e)

    def _wrap_backward(self, original: Any) -> Any:
        session = self

        @functools.wraps(original)
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            roots = None
            if not (session._busy or standing_aside()):
                roots = (tensors,) if isinstance(tensors, torch.Tensor) else tuple(tensors)
                if session._in_backward:  # a reentrant checkpoint's inner backward (issue 13)
                    session._emit("on_nested_backward", roots)
                    roots = None
            if roots is None:  # not the user's backward of a step: passed through
                try:
                    return original(tensors, *args, **kwargs)
                except BaseException as e:
                    raise passed_through(e)  # noqa: B904 (the same exception, our frames below it unlinked)
            grads = args[0] if args else kwargs.get("grad_tensors")
            session._begin_step_if_needed()
            session.stage = Stage.BACKWARD
            session.backward_create_graph = bool(kwargs.get("create_graph", args[2] if len(args) > 2 else False))
            session._emit("on_backward", roots, grads)
            # Forwards run inside backward (activation checkpointing recomputes) are not a new
            # step or stage: the forward hooks ignore them while this counter is up.
            session._in_backward += 1
            try:
                result = original(tensors, *args, **kwargs)
            except BaseException as e:
                raise passed_through(e)  # noqa: B904 (the same exception, our frames below it unlinked)
            finally:
                session._in_backward -= 1
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
            __tracebackhide__ = True
            if session._busy or session._in_loss or standing_aside():
                # _in_loss: a TorchFunctionMode on the stack (a check's tracer, the user's own)
                # re-dispatches F.<loss> to this wrapper from inside the first call: one call.
                try:
                    return original(*args, **kwargs)
                except BaseException as e:
                    raise passed_through(e)  # noqa: B904 (the same exception, our frames below it unlinked)
            prev = session.stage
            session.stage = Stage.LOSS
            session._in_loss += 1
            try:
                out = original(*args, **kwargs)
            except BaseException as e:
                raise passed_through(e)  # noqa: B904 (the same exception, our frames below it unlinked)
            finally:
                session._in_loss -= 1
            try:
                inp = args[0] if args else kwargs.get("input")
                tgt = args[1] if len(args) > 1 else kwargs.get("target")
                call = LossCall(name=name, input=inp, target=tgt, args=args, kwargs=kwargs,
                                output=out, frame=user_frame_from_stack(2), module=_loss_module_name(session))
                session._emit("on_loss", call)
            except POLICY_ERRORS:
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
            __tracebackhide__ = True
            original(opt, *args, **kwargs)
            if not session._busy:
                try:
                    frame = user_frame_from_stack(2)
                    if frame is not None:
                        note_optimizer_frame(opt, frame)
                    session.watch_optimizer(opt)
                    session._awaiting_first_step.add(id(opt))
                    session._widen_module_hooks()
                except Exception as e:
                    session._internal_error("session.optimizer_init", e)

        return __init__

    def _known_optimizer(self, optimizer: torch.optim.Optimizer) -> bool:
        for r in self._optimizers:  # (a loop, not any(genexpr): twice a step)
            if r() is optimizer:
                return True
        if self.discover:
            self.watch_optimizer(optimizer)
            return True
        return False

    def _opt_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> tuple[Any, dict[str, Any]] | None:
        __tracebackhide__ = True
        if self._busy or not self._known_optimizer(optimizer):
            return None
        if self._clock is None or (optimizer not in self._stepped_once and _replaces(self._clock(), optimizer)):
            self._clock = weakref.ref(optimizer)
        elif self._clock() is optimizer:
            self._steps_without_clock.clear()
        else:
            # A later phase (a student trained after its teacher, whose optimizer is still alive but
            # never steps again): this optimizer stepped HANDOFF times while the clock did not, far
            # more than a GAN's critic steps per generator step; it takes over, so the phase's
            # steps are steps again. The step it ends closes now.
            n = self._steps_without_clock[id(optimizer)] = self._steps_without_clock.get(id(optimizer), 0) + 1
            if n >= HANDOFF:
                self._clock = weakref.ref(optimizer)
                self._steps_without_clock.clear()
        self._stepped_once.add(optimizer)
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
        # Our torch-function modes (the first steps' tape and tracers) record nothing in the
        # update and would run their handlers on each of its ops: off until the post-hook.
        if self._modes_aside:
            put_back(self._modes_aside.pop(id(optimizer), []))  # (a step that raised before)
        if torch._C._len_torch_function_stack():  # (else nothing to set aside: no entry to undo)
            self._modes_aside[id(optimizer)] = set_aside()
        return None

    def _wrap_closure(self, optimizer: torch.optim.Optimizer, closure: Any) -> Any:
        session = self
        announced: list[bool] = []

        @functools.wraps(closure)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if announced and not session._busy:
                session._emit("on_closure_call", optimizer)
            result = closure(*args, **kwargs)
            if not announced and not session._busy:  # LBFGS calls it several times per step
                announced.append(True)
                session.stage = Stage.OPTIMIZER
                session._emit("on_optimizer_step_pre", optimizer)
            return result

        return wrapped

    def _opt_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        __tracebackhide__ = True
        if self._modes_aside:
            put_back(self._modes_aside.pop(id(optimizer), []))
        if self._busy or not self._known_optimizer(optimizer):
            return
        self._emit("on_optimizer_step_post", optimizer)
        self._awaiting_first_step.discard(id(optimizer))
        clock = self._clock() if self._clock is not None else None
        if clock is optimizer:
            self._end_step()
            self._maybe_narrow_module_hooks()


HANDOFF = 16  # steps of another optimizer without one of the clock's: it becomes the clock


def _replaces(clock: torch.optim.Optimizer | None, optimizer: torch.optim.Optimizer) -> bool:
    """`optimizer` takes over the step clock: the clock's optimizer was freed, or `optimizer` is
    a new one over the same tensors (re-created at an lr drop, or for a resumed stage)."""
    if clock is None:
        return True
    if clock is optimizer:
        return False
    first = [g["params"][0] for g in clock.param_groups if g["params"]]
    return bool(first) and any(p is q for g in optimizer.param_groups for p in g["params"][:1] for q in first)


def _loss_module_name(session: SessionHooks) -> str | None:
    # Called from a loss module's forward? Look one level up for `self`.
    f = find_frame(_module_method, sys._getframe(2), depth=4)
    if f is None:
        return None
    obj = f.f_locals["self"]
    return session._names.get(obj) if obj in session._names else type(obj).__name__


def _module_method(f: Any) -> bool:
    # `f_locals` builds a dict of the frame's locals (a few us a frame, at every loss call):
    # only a frame whose first parameter is `self` is asked for it.
    code = f.f_code
    return (code.co_argcount > 0 and code.co_varnames[0] == "self"
            and isinstance(f.f_locals.get("self"), nn.Module))


def _label_from_caller(module: nn.Module) -> str:
    """The user's variable name for a model (e.g. "model"), else its class name."""
    try:
        f = user_stack_frame()
        if f is not None:
            for scope in (released_locals(f), f.f_globals):
                for k, v in scope.items():
                    if v is module and not k.startswith("_"):
                        return k
    except Exception:
        pass
    return type(module).__name__
