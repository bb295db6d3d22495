"""A freeze rule applied to module names that cannot reach a parameter its own test selects
(session 15).

Fine-tuning code often freezes by name: `for name, module in model.named_modules(): if
<test on name>: freeze(module)`. The loop visits modules only. A parameter registered directly on
a module that has submodules (learnable queries, a class token, a position table, a gate) is a
module's own parameter, never a module: no name the loop hands the test is its name, so a
pattern written to freeze it (`...|q_cells`) never fires, and it trains while everything around
it is frozen.

Measured at the first optimizer step, from the user's code and the live objects:
  * the freeze loops in the user's files on the stack (`for <name>, <module> in
    X.named_modules()` / `named_children()` whose body has an `if` on the name that sets
    `requires_grad` to False, directly or through a function of the same file);
  * each watched model's trainable parameters registered on a module with children;
  * the loop's test evaluated with the name bound to such a parameter's name (in the loop's
    frame when it is still running, else with the arguments its live caller passed): only
    names, attributes, constants, comparisons, `re` matching and string tests are evaluated.
A test that selects the parameter by name is the finding. Its harm: the parameter's version
counter at the end against the first step (the optimizer updated it). A warning when it moved
and the test selects positively (a pattern, a list of names to freeze); an info when it did not
move or the test only excludes names (`name != "head"`: everything but one part frozen, where
a bare parameter kept trainable may be the intent, a prompt). A prompt-tuning model whose
freeze code iterates parameters, or freezes a submodule, has no such loop and stays quiet.
"""

from __future__ import annotations

import ast
import contextlib
import re
import sys
import types
import weakref
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage
from .._frames import UserFrame, is_user_file, released_locals
from .._source import own_nodes, parsed
from ._common import finding
from ._groups import scope_of

NAME_ITERS = ("named_modules", "named_children")
MAX_FRAMES = 8
_SAFE = (ast.Expression, ast.Name, ast.Attribute, ast.Constant, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Load,
         ast.cmpop, ast.boolop, ast.unaryop, ast.Subscript, ast.Call, ast.List, ast.Tuple, ast.Set, ast.GeneratorExp,
         ast.ListComp, ast.comprehension, ast.Store, ast.keyword, ast.BinOp, ast.operator, ast.Slice, ast.JoinedStr,
         ast.FormattedValue)
_CALLS = {"any", "all", "len", "str", "isinstance", "hasattr", "getattr"}
_METHODS = {"match", "fullmatch", "search", "startswith", "endswith", "lower", "upper", "split", "strip",
            "rstrip", "lstrip", "replace"}


def _safe(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if not isinstance(n, _SAFE):
            return False
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Name) and f.id in _CALLS:
                continue
            if isinstance(f, ast.Attribute) and f.attr in _METHODS:
                continue
            return False
    return True


def _freezes(stmts: list[ast.stmt], funcs: dict[str, ast.AST], depth: int = 0) -> bool:
    """The statements set some `requires_grad` to False (through a function of the file, once)."""
    for stmt in stmts:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "requires_grad"
                                                 for t in n.targets) \
                    and isinstance(n.value, ast.Constant) and n.value.value is False:
                return True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "requires_grad_" \
                    and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value is False:
                return True
            if isinstance(n, ast.Call) and depth == 0:
                name = n.func.id if isinstance(n.func, ast.Name) else \
                    n.func.attr if isinstance(n.func, ast.Attribute) else None
                target = funcs.get(name or "")
                if target is not None and _freezes(getattr(target, "body", []), funcs, 1):
                    return True
    return False


class FreezeLoop:
    def __init__(self, path: str, func: ast.AST | None, loop: ast.For, test: ast.expr, name: str,
                 module: str | None) -> None:
        self.path, self.func, self.loop, self.test = path, func, loop, test
        self.name, self.module = name, module
        self.negative = any(isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not) or
                            isinstance(n, ast.Compare) and any(isinstance(o, (ast.NotIn, ast.NotEq)) for o in n.ops)
                            for n in ast.walk(test))


def freeze_loops(path: str) -> list[FreezeLoop]:
    tree = parsed(path)
    if tree is None:
        return []
    funcs: dict[str, ast.AST] = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef,
                                                                                    ast.AsyncFunctionDef))}
    out = []
    scopes: list[ast.AST] = [tree, *funcs.values()]
    seen: set[int] = set()
    for scope in reversed(scopes):  # functions first: a loop belongs to its innermost function
        for loop in ast.walk(scope):
            if not isinstance(loop, ast.For) or id(loop) in seen:
                continue
            it = loop.iter
            if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in NAME_ITERS):
                continue
            t = loop.target
            if not (isinstance(t, ast.Tuple) and len(t.elts) == 2 and isinstance(t.elts[0], ast.Name)):
                continue
            seen.add(id(loop))
            name = t.elts[0].id
            module = t.elts[1].id if isinstance(t.elts[1], ast.Name) else None
            for n in ast.walk(loop):
                if isinstance(n, ast.If) and any(isinstance(x, ast.Name) and x.id == name for x in ast.walk(n.test)) \
                        and _freezes(n.body, funcs) and _safe(n.test):
                    out.append(FreezeLoop(path, scope if scope is not tree else None, loop, n.test, name, module))
    return out


def _live(frames: list[types.FrameType], fl: FreezeLoop) -> dict[str, Any] | None:
    """The namespace the loop's test ran in: its own frame's, once the loop is behind the line the
    frame runs now, or its function's arguments as a live caller passed them (a call above the
    caller's current line, in the caller's own function)."""
    func = fl.func
    for f in frames:
        if f.f_code.co_filename != fl.path:
            continue
        if func is None and f.f_code.co_name == "<module>" or \
                isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.f_code.co_name == func.name and \
                func.lineno <= f.f_code.co_firstlineno <= (func.end_lineno or func.lineno):
            if (fl.loop.end_lineno or fl.loop.lineno) >= f.f_lineno:
                return None  # not run yet (or still running): nothing to judge
            return {**f.f_globals, **released_locals(f)}
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    for f in frames:  # its caller, still running: bind the arguments of the call it made
        tree = parsed(f.f_code.co_filename)
        if tree is None:
            continue
        for n in own_nodes(scope_of(tree, f.f_code)):
            if not (isinstance(n, ast.Call) and (isinstance(n.func, ast.Name) and n.func.id == func.name or
                                                 isinstance(n.func, ast.Attribute) and n.func.attr == func.name)):
                continue
            if (n.end_lineno or n.lineno) >= f.f_lineno:
                continue
            scope = {**f.f_globals, **released_locals(f)}
            bound = _bind(func, n, scope)
            if bound is not None:
                home = f.f_globals if f.f_code.co_filename == fl.path else _module_globals(fl.path)
                return None if home is None else {**home, **bound}
    return None


def _module_globals(path: str) -> dict[str, Any] | None:
    for mod in list(sys.modules.values()):
        if getattr(mod, "__file__", None) == path:
            return vars(mod)
    return None


def _value(node: ast.expr, scope: dict[str, Any]) -> Any:
    if not _safe(node):
        raise ValueError("not evaluated")
    names = dict(scope)
    names.setdefault("__builtins__", __builtins__)
    return eval(compile(ast.Expression(node), "<freeze>", "eval"), names)


def _bind(func: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, scope: dict[str, Any]) -> dict[str, Any] | None:
    params = [a.arg for a in func.args.args]
    out: dict[str, Any] = {}
    try:
        if isinstance(call.func, ast.Attribute) and params and params[0] in ("self", "cls"):
            out[params[0]] = _value(call.func.value, scope)
            params = params[1:]
        for p, a in zip(params, call.args):
            out[p] = _value(a, scope)
        for k in call.keywords:
            if k.arg is not None:
                out[k.arg] = _value(k.value, scope)
        defaults = func.args.defaults
        for p, d in zip(params[len(params) - len(defaults):], defaults):
            if p not in out:
                out[p] = _value(d, scope)
    except Exception:
        return None
    return out


def bare_parameters(root: torch.nn.Module) -> list[tuple[str, torch.nn.Module, torch.Tensor]]:
    """Trainable parameters registered on a module that has submodules: (name, owner, tensor)."""
    out = []
    for mname, mod in root.named_modules():
        if next(mod.children(), None) is None:
            continue
        for pname, p in mod.named_parameters(recurse=False):
            if p.requires_grad:
                out.append((f"{mname}.{pname}" if mname else pname, mod, p))
    return out


class BareFreeze:
    """Bare parameters a name-based module freeze missed, judged once at the first step."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.done = False
        self.held: list[tuple[FreezeLoop, str, weakref.ref[torch.Tensor], int, int, dict[str, Any]]] = []

    def first_step(self, start: types.FrameType | None) -> None:
        if self.done:
            return
        self.done = True
        frames: list[types.FrameType] = []
        f = start
        while f is not None and len(frames) < MAX_FRAMES:
            if is_user_file(f.f_code.co_filename):
                frames.append(f)
            f = f.f_back
        loops = [fl for path in dict.fromkeys(fr.f_code.co_filename for fr in frames) for fl in freeze_loops(path)]
        if not loops:
            return
        for fl in loops:
            scope = _live(frames, fl)
            if scope is None:
                continue
            try:
                root = _value(fl.loop.iter.func.value, scope)  # type: ignore[attr-defined]
            except Exception:
                continue
            if not isinstance(root, torch.nn.Module):
                continue
            params = list(root.parameters())
            frozen = [p for p in params if not p.requires_grad]
            if len(frozen) < 2:
                continue
            for name, owner, p in bare_parameters(root):
                local = dict(scope)
                local[fl.name] = name
                if fl.module is not None:
                    local[fl.module] = owner
                try:
                    with contextlib.suppress(re.error):
                        selected = bool(_value(fl.test, local))
                except Exception:
                    continue
                if not selected:
                    continue
                ev = {"parameter": name, "elements": p.numel(),
                      "registered_on": type(owner).__name__ + (f" ({n})" if (n := _owner_name(root, owner)) else ""),
                      "frozen_tensors": len(frozen), "frozen_elements": sum(t.numel() for t in frozen),
                      "trainable_tensors": len(params) - len(frozen),
                      "loop_iterates": fl.loop.iter.func.attr,  # type: ignore[attr-defined]
                      "test_line": fl.test.lineno, "test_selects_it": True}
                self.held.append((fl, name, weakref.ref(p), p._version, p.numel(), ev))

    def findings(self) -> list[Finding]:
        out = []
        for fl, name, ref, version, _numel, ev in self.held:
            p = ref()
            moved = p is not None and p._version != version
            ev = {**ev, "updated_after_first_step": moved}
            warn = moved and not fl.negative
            if warn:
                ev["harm"] = f"{name} was updated by the optimizer while the freeze rule selects it"
            line = fl.loop.lineno
            frame = UserFrame(fl.path, line, getattr(fl.func, "name", "<module>"), _source_line(fl.path, line))
            out.append(finding("gradient.freeze_missed_bare_parameter", category=Category.GRADIENT,
                               severity=Severity.WARNING if warn else Severity.INFO, stage=Stage.OPTIMIZER,
                               frame=frame, parameter=name, module=ev["registered_on"], param=name,
                               owner=ev["registered_on"],
                               iterates=ev["loop_iterates"], test_line=ev["test_line"],
                               frozen=ev["frozen_tensors"], elements=ev["elements"],
                               variant=None if moved else "unmoved", evidence=ev))
        self.held = []
        return out


def _owner_name(root: torch.nn.Module, owner: torch.nn.Module) -> str:
    for n, m in root.named_modules():
        if m is owner:
            return n
    return ""


def _source_line(path: str, line: int) -> str:
    import linecache

    return linecache.getline(path, line).strip()
