"""Transparency: what a session attaches stays invisible to what users do with their objects.

The only things torchtriage puts on a user's object are the forward pre/post hooks on each
watched root module (root-only mode, `_hooks.py`), in the module's own hook dictionaries. Every
other piece of per-object state lives in the session (weak-keyed maps). Those hooks were bound
methods of the session, so a copy, a pickle or a script of the module followed them into
the session (issue 10: `deepcopy` → "cannot pickle 'module' object", `torch.save` → "cannot
pickle 'weakref.ReferenceType' object", `jit.script` → "try blocks aren't supported").

While a session is installed this module keeps them out of sight:

- `nn.Module.__reduce_ex__` (what `copy.copy`, `copy.deepcopy`, `pickle` and `torch.save` all
  call, whatever `__getstate__` the user's class defines) hands back the state with our hooks
  filtered out of the hook dictionaries: the copy carries the user's hooks only, and a saved
  model loads without torchtriage. (The hooks are `_roothook.RootHook` objects, which hold the
  session weakly and copy/pickle inert: the fallback for a class with its own `__reduce_ex__`
  or `__deepcopy__`.)
- `torch.jit._recursive.get_hook_stubs` (what `torch.jit.script` compiles a module's hooks from)
  sees the module without our hooks.
- `torch.nn.modules.module._has_any_global_hook` (read by `torch.compile`'d modules to warn
  about global hooks) ignores our global hooks.
- `torch.export.export` runs with our global module hooks out (strict export cannot trace
  torch's hooked module call path) and the session paused.
- `standing_aside()`: the hooks and wrappers do nothing while the user's code is being
  compiled, exported, traced by `torch.jit.trace` or run under a `torch.func` transform: what
  runs there is not a training step, and tensors seen there must not outlive it.

All these patches go through `session._patch` and are removed on exit. A forked child process
(DataLoader workers with the fork start method) finds the session paused.
"""

from __future__ import annotations

import contextlib
import functools
import os
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn
from torch.nn.modules import module as _module_mod

from ._roothook import RootHook

if TYPE_CHECKING:
    from ._session import Session

# The hook dictionaries of a module that may hold our entries; the last two are keyed by the
# hook's handle id and carry flags for the entries of `_forward_hooks`/`_forward_pre_hooks`.
_HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks")
_FLAG_DICTS = ("_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs", "_forward_hooks_always_called")
_GLOBAL_HOOK_DICTS = ("_global_backward_pre_hooks", "_global_backward_hooks", "_global_forward_pre_hooks",
                      "_global_forward_hooks", "_global_forward_hooks_always_called",
                      "_global_forward_hooks_with_kwargs")

_is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
_get_tracing_state = torch._C._get_tracing_state
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def standing_aside() -> bool:
    """True while the user's code is compiled, exported, jit-traced or vmapped/grad-transformed."""
    return bool(_is_compiling() or _get_tracing_state() is not None or _functorch_active())


class HookOwner:
    """Base class of the session's hook mixin: its bound methods are torchtriage's hooks."""


def is_ours(hook: Any) -> bool:
    """A hook torchtriage registered: a root's `RootHook`, a bound method of a session, or a
    function marked with `our_hook`."""
    return (isinstance(hook, RootHook) or isinstance(getattr(hook, "__self__", None), HookOwner)
            or getattr(hook, "__torchtriage_hook__", False) is True)


def our_hook(fn: Any) -> Any:
    """Mark `fn`, a module hook a check registers on a user's module, as torchtriage's: copies,
    pickles, `torch.save` and `torch.jit.script` of the module leave it out (a local function
    does not pickle, and it would carry the check's state into the copy)."""
    fn.__torchtriage_hook__ = True
    return fn


def _our_ids(state: dict[str, Any]) -> set[int]:
    ids: set[int] = set()
    for key in _HOOK_DICTS:
        hooks = state.get(key)
        if isinstance(hooks, dict):
            ids.update(k for k, h in hooks.items() if is_ours(h))
    return ids


def without_our_hooks(state: Any) -> Any:
    """`state` (a module's `__getstate__` result) with our hooks left out of a copy of each
    hook dictionary that held one; the same object when it held none."""
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], dict):
        return (without_our_hooks(state[0]), state[1])  # (dict, slots) state
    if not isinstance(state, dict):
        return state
    ids = _our_ids(state)
    if not ids:
        return state
    state = dict(state)
    for key in (*_HOOK_DICTS, *_FLAG_DICTS):
        hooks = state.get(key)
        if isinstance(hooks, dict):
            state[key] = OrderedDict((k, v) for k, v in hooks.items() if k not in ids)
    return state


def _reduce_ex(self: nn.Module, protocol: int) -> Any:
    reduced = object.__reduce_ex__(self, protocol)
    if isinstance(reduced, tuple) and len(reduced) > 2:
        state = without_our_hooks(reduced[2])
        if state is not reduced[2]:
            reduced = (*reduced[:2], state, *reduced[3:])
    return reduced


@contextlib.contextmanager
def _hidden(dicts: dict[str, dict[int, Any]]) -> Iterator[None]:
    """Our entries out of these hook dictionaries (name -> dict) for the block, put back after
    in their order; whatever the block registered stays."""
    ids = _our_ids(dicts)
    if not ids:
        yield
        return
    copies = {k: list(v.items()) for k, v in dicts.items()}
    for v in dicts.values():
        for i in ids:
            v.pop(i, None)
    try:
        yield
    finally:
        for k, v in dicts.items():
            added = dict(v)
            v.clear()
            v.update(copies[k])
            v.update((i, h) for i, h in added.items() if i not in v)


def hidden_hooks(module: nn.Module) -> contextlib.AbstractContextManager[None]:
    """Our hooks out of `module`'s hook dictionaries for the block."""
    return _hidden({k: v for k in (*_HOOK_DICTS, *_FLAG_DICTS) if isinstance(v := module.__dict__.get(k), dict)})


def hidden_global_hooks() -> contextlib.AbstractContextManager[None]:
    """Our global module hooks out of torch's global hook dictionaries for the block."""
    names = {"_forward_pre_hooks": "_global_forward_pre_hooks", "_forward_hooks": "_global_forward_hooks",
             "_forward_hooks_with_kwargs": "_global_forward_hooks_with_kwargs",
             "_forward_hooks_always_called": "_global_forward_hooks_always_called"}
    return _hidden({k: v for k, g in names.items() if isinstance(v := getattr(_module_mod, g, None), dict)})


def _wrap_get_hook_stubs(original: Any) -> Any:
    def get_hook_stubs(nn_module: Any) -> Any:
        with hidden_hooks(nn_module):
            return original(nn_module)

    get_hook_stubs.__wrapped__ = original  # type: ignore[attr-defined]
    return get_hook_stubs


def _wrap_export(original: Any, session: Session) -> Any:
    # Strict `torch.export` cannot trace through torch's hooked module call path (the one any
    # global module hook selects): while it traces, our global hooks are out and we are paused.
    @functools.wraps(original)
    def export(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        with hidden_global_hooks(), session.paused():
            return original(*args, **kwargs)

    return export


def _has_any_global_hook_but_ours() -> bool:
    """torch's `_has_any_global_hook()`, as it would answer without torchtriage's hooks."""
    ours = {i for name in ("_global_forward_pre_hooks", "_global_forward_hooks")
            for i, h in (getattr(_module_mod, name, None) or {}).items() if is_ours(h)}
    return any(i not in ours for name in _GLOBAL_HOOK_DICTS for i in (getattr(_module_mod, name, None) or {}))


_fork_guard: list[bool] = []
_installed: weakref.WeakSet[Any] = weakref.WeakSet()  # sessions between install and uninstall


def _pause_sessions_in_child() -> None:
    # A forked child (a DataLoader worker) inherits the installed session: its hooks would
    # count steps and queue device flags nobody reads there. Inert in the child.
    for s in list(_installed):
        s._busy += 1


def install(session: Session) -> None:
    """Patch the readers above for the session's lifetime (undone by `_uninstall`)."""
    if not _fork_guard and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_pause_sessions_in_child)  # once per process
        _fork_guard.append(True)
    _installed.add(session)
    session._patch(nn.Module, "__reduce_ex__", _reduce_ex)
    jit_recursive = getattr(torch.jit, "_recursive", None)
    if jit_recursive is not None and hasattr(jit_recursive, "get_hook_stubs"):
        session._patch(jit_recursive, "get_hook_stubs", _wrap_get_hook_stubs(jit_recursive.get_hook_stubs))
    export_mod = getattr(torch, "export", None)
    if export_mod is not None and callable(getattr(export_mod, "export", None)):
        session._patch(export_mod, "export", _wrap_export(export_mod.export, session))
    if hasattr(_module_mod, "_has_any_global_hook"):
        session._patch(_module_mod, "_has_any_global_hook", _has_any_global_hook_but_ours)


def uninstall(session: HookOwner) -> None:
    """The session's patches are undone by the session itself; forget it for forked children."""
    _installed.discard(session)


def remove_handle(handle: Any) -> None:
    """Remove a hook handle, and the flag `register_module_forward_hook(with_kwargs=True)`
    leaves behind in torch's `_global_forward_hooks_with_kwargs` (the handle does not know that
    dict): a flag left there makes `torch.compile`'d modules warn about global hooks forever."""
    with contextlib.suppress(Exception):
        handle.remove()
    flags = getattr(_module_mod, "_global_forward_hooks_with_kwargs", None)
    if (isinstance(flags, dict) and getattr(handle, "id", None) in flags
            and handle.id not in _module_mod._global_forward_hooks):
        del flags[handle.id]
