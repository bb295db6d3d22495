"""Which frame is the user's: reading a traceback upward from the error, the first frame
that is neither Python's standard library, an installed package (torch included) nor
torchtriage itself. That is the line a user should open first (seed G.1)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import sys
import sysconfig
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ._dispatch_frames import dispatch_frames

_HERE = os.path.dirname(os.path.abspath(__file__))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))


def _library_roots() -> tuple[str, ...]:
    roots = {_HERE, _TORCH}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            roots.add(os.path.abspath(sysconfig.get_paths()[key]))
        except KeyError:
            pass
    for p in sys.path:
        if p.endswith(("site-packages", "dist-packages")):
            roots.add(os.path.abspath(p))
    return tuple(sorted(roots, key=len, reverse=True))


_ROOTS = _library_roots()
_extra_library_roots: list[str] = []


@dataclasses.dataclass(frozen=True)
class UserFrame:
    file: str
    line: int
    function: str
    source: str = ""


_user_file_cache: dict[str, bool] = {}
_cache_roots: list[str] = []  # the `_extra_library_roots` the cache was filled with


def is_user_file(filename: str) -> bool:
    """True for a file of the user's own code."""
    # Hooks ask this for every frame of the stack at each backward (the user's line): cached
    # per file name, since abspath + prefix tests cost ~2 us a frame.
    if _cache_roots != _extra_library_roots:
        _user_file_cache.clear()
        _code_cache.clear()
        _cache_roots[:] = _extra_library_roots
    found = _user_file_cache.get(filename)
    if found is None:
        found = _user_file_cache[filename] = _is_user_file(filename)
    return found


def _is_user_file(filename: str) -> bool:
    if not filename or filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    if path == _HERE or path.startswith(_HERE + os.sep):
        return False
    # A user's script may live under a checkout that sits in site-packages only
    # when installed; an editable install of the user's code lives elsewhere.
    return not any(path.startswith(root + os.sep) for root in _ROOTS + tuple(_extra_library_roots))


def _source_line(filename: str, lineno: int) -> str:
    import linecache

    return linecache.getline(filename, lineno).strip()


_frames_seen: dict[tuple[str, int, str], UserFrame] = {}


def _frame(f: types.FrameType, lineno: int) -> UserFrame:
    # Hooks take the user's frame at every backward and loss call; the same few lines come back
    # each step, so their (immutable) UserFrame is reused instead of re-reading the source line.
    code = f.f_code
    key = (code.co_filename, lineno, code.co_name)
    found = _frames_seen.get(key)
    if found is None:
        if len(_frames_seen) > 4096:  # generated code (exec) must not grow it without bound
            _frames_seen.clear()
        found = _frames_seen[key] = UserFrame(code.co_filename, lineno, code.co_name,
                                              _source_line(code.co_filename, lineno))
    return found


def iter_tb(tb: types.TracebackType | None) -> Iterator[tuple[types.FrameType, int]]:
    """Traceback entries from outermost to innermost."""
    while tb is not None:
        yield tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next


def user_frame_from_tb(tb: types.TracebackType | None) -> UserFrame | None:
    """The innermost user frame of a traceback."""
    found = None
    for f, lineno in iter_tb(tb):
        if is_user_file(f.f_code.co_filename):
            found = _frame(f, lineno)
    return found


def find_frame(match: Callable[[types.FrameType], bool], start: types.FrameType | None, *,
               depth: int | None = None, stop: types.FrameType | None = None) -> types.FrameType | None:
    """The innermost frame `match` accepts, walking outward from `start` (e.g.
    `sys._getframe(1)`, the caller's caller): at most `depth` frames, never `stop` nor past it.
    The one stack walk: the user's frame, a caller named `update_bn`, the `self` of a caller."""
    f = start
    n = 0
    while f is not None and f is not stop and (depth is None or n < depth):
        if match(f):
            return f
        f = f.f_back
        n += 1
    return None


def in_user_file(f: types.FrameType) -> bool:
    """True for a frame of the user's own code (a `find_frame` test)."""
    return is_user_file(f.f_code.co_filename)


_code_cache: dict[types.CodeType, bool] = {}  # code object -> `_user_code` of its frames


def released_locals(f: types.FrameType) -> dict[str, Any]:
    """A frame's local variables, read without keeping them alive.

    Before Python 3.13, `frame.f_locals` of a function frame is a dict cached on the frame: the
    values read stay referenced by it until the next read or the frame's exit. Read from a hook
    in a training function, that pins the step's loss and its graph for the rest of the epoch
    (and our own graph check then sees "loss graphs kept"). The copy is returned and the cache
    emptied; the frame's variables themselves are untouched (CPython writes the cache back only
    for a trace function, and never deletes a variable the cache lacks). A module or class body's
    `f_locals` is its real namespace, and from 3.13 a live proxy: both returned as they are."""
    scope = f.f_locals
    if sys.version_info >= (3, 13) or not f.f_code.co_flags & _CO_OPTIMIZED or scope is f.f_globals:
        return scope
    copy = dict(scope)
    scope.clear()
    return copy


_CO_OPTIMIZED = 0x0001  # (inspect.CO_OPTIMIZED: a function's frame, whose f_locals is a snapshot)


def user_stack_frame(skip: int = 0) -> types.FrameType | None:
    """The innermost frame object of the user's code on the current call stack, searched from
    `skip` frames above the caller. A torch-function mode's handler (the user's own mode, which
    our modes sit under) only forwards the op: the line is where the op was called."""
    # Hooks ask this several times a step (the root call's line, the loss's, backward's): the
    # answer per code object is cached, and the walk is one loop (no predicate call a frame).
    if _cache_roots != _extra_library_roots:
        is_user_file("")  # (clears both caches)
    cache = _code_cache
    f: types.FrameType | None = sys._getframe(skip + 1)
    while f is not None:
        code = f.f_code
        mine = cache.get(code)
        if mine is None:
            if len(cache) > 4096:  # generated code (exec) must not grow it without bound
                cache.clear()
            mine = cache[code] = _user_code(f)
        if mine:
            return f
        f = f.f_back
    return None


def _user_code(f: types.FrameType) -> bool:
    return is_user_file(f.f_code.co_filename) and f.f_code.co_name != "__torch_function__"


def user_frame_of_line(file: str, line: int, function: str) -> UserFrame:
    """A line of the user's source that no frame runs now (found by reading the source)."""
    return UserFrame(file, line, function, _source_line(file, line))


def user_files_on_stack(skip: int = 1) -> list[str]:
    """The user's source files on the current call stack, innermost first."""
    out: list[str] = []
    f: types.FrameType | None = sys._getframe(skip)
    while f is not None:
        file = f.f_code.co_filename
        if file not in out and is_user_file(file):
            out.append(file)
        f = f.f_back
    return out


def user_functions_on_stack() -> set[tuple[str, str]]:
    """(file, function name) of the user's frames running now."""
    out: set[tuple[str, str]] = set()
    f: types.FrameType | None = sys._getframe(1)
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            out.add((f.f_code.co_filename, f.f_code.co_name))
        f = f.f_back
    return out


def user_frame_of(f: types.FrameType, lineno: int | None = None) -> UserFrame:
    """`f` as a `UserFrame` (at `lineno`, default the line it runs now)."""
    return _frame(f, f.f_lineno if lineno is None else lineno)


def user_frame_from_stack(skip: int = 1) -> UserFrame | None:
    """The innermost user frame of the current call stack (used inside hooks)."""
    f = user_stack_frame(skip)
    return _frame(f, f.f_lineno) if f is not None else None


def is_our_file(filename: str) -> bool:
    """True for a file of torchtriage itself."""
    path = os.path.abspath(filename)
    return path == _HERE or path.startswith(_HERE + os.sep)


def without_our_frames(tb: types.TracebackType | None, also: Callable[[str], bool] = lambda fn: False,
                       hooks: bool = False) -> types.TracebackType | None:
    """`tb` with torchtriage's entries (and those whose file `also` accepts) unlinked, in place.

    Our frames can sit anywhere in the chain (a hook, a wrapper or a TorchFunctionMode between
    the user's line and torch's op), so each one is unlinked, not only the leading ones, with
    the torch frames that only our modes (and, with `hooks`, only our module hooks) put there
    (`_dispatch_frames`). The user then sees the traceback Python would show without
    torchtriage (issue 10)."""
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    mine = lambda e: is_our_file(e.tb_frame.f_code.co_filename)  # noqa: E731
    dropped = dispatch_frames(entries, mine, hooks)
    kept = [e for i, e in enumerate(entries)
            if i not in dropped and not (mine(e) or also(e.tb_frame.f_code.co_filename))]
    for a, b in zip(kept, kept[1:]):
        a.tb_next = b
    if kept:
        kept[-1].tb_next = None
    return kept[0] if kept else None


def passed_through(e: BaseException) -> BaseException:
    """`e`, on its way out through one of our pass-through frames (a mode's handler, a patched
    function's wrapper), with the frames below it that only we put there unlinked (ours, and
    torch's dispatch frames our modes cause). Re-raised from there (`raise passed_through(e)`),
    a traceback the user prints after catching `e` inside the session holds that one frame of
    ours instead of a chain of them (each layer trims what is below it; issue 10)."""
    tb = e.__traceback__
    if tb is not None and tb.tb_next is not None:
        e.__traceback__ = without_our_frames(tb.tb_next)
    return e


def trims_errors(handler: Callable[..., Any]) -> Callable[..., Any]:
    """For one of our pass-through modes' `__torch_function__`: an error raised in the op leaves
    through it with the frames below that only we put there unlinked (`passed_through`)."""
    @functools.wraps(handler)
    def __torch_function__(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return handler(*args, **kwargs)
        except BaseException as e:
            raise passed_through(e)  # noqa: B904 (the same exception, our frames below it unlinked)

    return __torch_function__


def user_stacklevel() -> int:
    """The `stacklevel` that makes a warning issued by our caller name the user's line: the
    innermost user frame, else the innermost frame outside torchtriage and torch."""
    f: types.FrameType | None = sys._getframe(1)
    level, fallback = 1, 0
    while f is not None:
        fn = f.f_code.co_filename
        if is_user_file(fn):
            return level
        if not fallback and not is_our_file(fn) and not fn.startswith((_TORCH + os.sep, "<frozen")):
            fallback = level
        f = f.f_back
        level += 1
    return fallback or 1


# optimizer -> the user's line that built it (known when a discovering session saw it being built)
_optimizer_frames: weakref.WeakKeyDictionary[Any, UserFrame] = weakref.WeakKeyDictionary()


# optimizer -> (finder, files): how to find that line in the source, for an optimizer built
# before the session (`_built_at.construction_line`); tried once, when a finding asks
_optimizer_finders: weakref.WeakKeyDictionary[Any, tuple[Callable[[Any, list[str]], UserFrame | None], list[str]]] = \
    weakref.WeakKeyDictionary()


def note_optimizer_frame(optimizer: Any, frame: UserFrame) -> None:
    _optimizer_frames[optimizer] = frame


def note_optimizer_finder(optimizer: Any, finder: Callable[[Any, list[str]], UserFrame | None],
                          files: list[str]) -> None:
    """For an optimizer whose construction no session saw: where to look for its line."""
    if optimizer not in _optimizer_frames:
        _optimizer_finders[optimizer] = (finder, files)


def optimizer_frame_known(optimizer: Any) -> UserFrame | None:
    """The line noted for `optimizer` so far (no source read)."""
    try:
        return _optimizer_frames.get(optimizer)
    except TypeError:
        return None


def optimizer_frame(optimizer: Any) -> UserFrame | None:
    """The user's line that created `optimizer`: seen by a discovering session, or read from
    the user's source for one built before the session (`_built_at`)."""
    try:
        frame = _optimizer_frames.get(optimizer)
        if frame is None:
            found = _optimizer_finders.pop(optimizer, None)
            if found is not None:  # (the user's files on the stack now count too: the training loop's)
                frame = found[0](optimizer, [*found[1], *user_files_on_stack(2)])
                if frame is not None:
                    _optimizer_frames[optimizer] = frame
        return frame
    except TypeError:
        return None


def carried_name(source: str) -> str | None:
    """The one name an assignment both reads and rebinds: `h` in `h = torch.tanh(W(x) + h)`,
    `hidden` in `output, hidden = model(data, hidden)`: a value carried from one iteration to
    the next. None when the line is no such assignment (or rebinds several names it reads)."""
    try:
        tree = ast.parse(source.strip())
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.Assign, ast.AugAssign)):
        return None
    stmt = tree.body[0]
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    bound = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    read = {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if isinstance(stmt, ast.AugAssign):
        read |= bound
    both = bound & read
    return both.pop() if len(both) == 1 else None
