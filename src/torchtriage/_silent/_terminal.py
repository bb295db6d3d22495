"""Bootstrapped targets and recursive returns that cross episode ends (session 13).

A reinforcement-learning target bootstraps from the value of the next state: `r + γ·V(s')`, a
return `R = r + γ·R'`, an advantage `gae = δ + γλ·gae'`. At a terminal transition there is no
next state of the same episode: every correct program cuts the bootstrap there, with the
episode's done / terminal flag (`(1 - done)`, `not_done`, `masks`, `if done: gae = 0`). Two
faults keep it:

- a replay batch unpacks the done flags and never uses them (`states, actions, rewards,
  next_states, dones = batch` and `target = rewards + gamma * max_next_q`): every terminal
  transition's target includes `γ·max Q(s')` of a state of another episode
  (`silent.bootstrap_ignores_done`);
- a backward recursion over a rollout masks one term with the done flag but carries the running
  sum across it (`gae = gae * gamma * lam` then `gae += r + γ·V'·(1 - done) - V`): the last step of
  an episode absorbs the next episode's advantages (`silent.return_crosses_episode_end`).

Found on the user's functions live on the stack when a loss is computed or a backward runs (the
function that computes the target or the rollout's returns is usually the one that computes the
loss, or its caller): its source gives the candidates (`ast`), its live locals the evidence.
Harm measured: the done flags of the batch or of the rollout read in the frame (one read of a
small tensor, each function at most `MAX_TRIES` times until one holds a terminal flag): the
terminal transitions whose target bootstraps across the end. A finding is a warning when there
is at least one.
"""

from __future__ import annotations

import ast
import types
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import is_user_file, user_frame_of, user_frame_of_line
from .._source import parsed

MAX_FUNCTIONS = 256
MAX_TRIES = 50
MAX_FRAMES = 4  # user frames looked at from the innermost


@dataclass
class _Candidate:
    kind: str  # "unused" / "carry"
    line: int
    name: str  # the done field / the carried name
    sources: list[str]  # names whose live values hold the done flags
    text: str  # the statement
    tries: int = 0
    where: tuple[str, str] | None = None  # (file, function) of a helper the live frame calls


# ---------------------------------------------------------------- static analysis
def _names(e: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(e) if isinstance(n, ast.Name)}


def _unused_done_fields(func: ast.AST) -> list[_Candidate]:
    """The names of a ≥ 4-field tuple unpacking that nothing reads but their own reassignments."""
    out = []
    for node in ast.walk(func):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple)):
            continue
        fields = [e.id for e in node.targets[0].elts if isinstance(e, ast.Name)]
        if len(fields) < 4 or isinstance(node.value, ast.Tuple):
            continue
        if len(_fed_to_models(func, fields)) < 2:
            continue  # (a bootstrap reads a model on the states and on the next states)
        for name in fields:
            used = False
            for n in ast.walk(func):
                if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load):
                    used = True
                    break
            if used:
                # every read is inside a reassignment of the name itself (`x = torch.tensor(x).to(dev)`)
                used = _read_beyond_self(func, name)
            if not used and not name.startswith("_"):
                target = _target_line(func, node, fields, name)
                if target is not None:  # (no bootstrapped target: a field left unused for another reason)
                    out.append(_Candidate("unused", target[0], name, [name], target[1]))
    return out


def _target_line(func: ast.AST, unpack: ast.Assign, fields: list[str], done: str) -> tuple[int, str] | None:
    """The bootstrapped target: the first assignment after the unpacking that adds a term reading
    a batch field (the rewards) to a product (gamma times the next value) that reads no field."""
    others = set(fields) - {done}
    for n in sorted((n for n in ast.walk(func) if isinstance(n, ast.Assign) and n.lineno > unpack.lineno),
                    key=lambda n: n.lineno):
        terms = _terms(n.value)
        if len(terms) >= 2 and any(_names(t) & others for t in terms) and any(
                isinstance(t, ast.BinOp) and isinstance(t.op, ast.Mult) and not (_names(t) & others) for t in terms):
            return n.lineno, ast.unparse(n)[:160]
    return None


_PLUMBING = frozenset({"FloatTensor", "LongTensor", "BoolTensor", "ByteTensor", "Tensor", "tensor", "as_tensor",
                       "from_numpy", "array", "asarray", "stack", "cat", "concatenate", "vstack", "to", "float",
                       "long", "int", "bool", "list", "tuple", "len", "zip", "np", "print", "type", "isinstance"})


def _fed_to_models(func: ast.AST, fields: list[str]) -> set[str]:
    """The fields passed directly to a call that is not a conversion (a model, a network's forward)."""
    fed: set[str] = set()
    for n in ast.walk(func):
        if not isinstance(n, ast.Call):
            continue
        callee = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
        if callee in _PLUMBING:
            continue
        fed.update(a.id for a in n.args if isinstance(a, ast.Name) and a.id in fields)
    return fed


def _read_beyond_self(func: ast.AST, name: str) -> bool:
    selfs: set[int] = set()
    for n in ast.walk(func):
        if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                and n.targets[0].id == name):
            selfs.update(id(m) for m in ast.walk(n.value))
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and id(n) not in selfs
               for n in ast.walk(func))


def _reversed_iter(it: ast.expr) -> bool:
    if isinstance(it, ast.Call):
        callee = it.func.attr if isinstance(it.func, ast.Attribute) else getattr(it.func, "id", "")
        if callee == "reversed":
            return True
        if callee == "range" and len(it.args) == 3:
            step = it.args[2]
            return isinstance(step, ast.UnaryOp) and isinstance(step.op, ast.USub)
        if callee in ("list", "enumerate", "zip"):
            return any(_reversed_iter(a) for a in it.args)
    if isinstance(it, ast.Subscript) and isinstance(it.slice, ast.Slice):
        neg = it.slice.step
        if isinstance(neg, ast.UnaryOp) and isinstance(neg.op, ast.USub):
            return True
        return _reversed_iter(it.value)
    return False


def _per_step(e: ast.expr, targets: set[str], index: frozenset[str] = frozenset()) -> str | None:
    """The base name of a per-step value: a loop target, or a subscript of a name by an index
    that reads a loop target (`dones[t]`, `masks[step + 1]`), through `.float()` and the like."""
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and not e.args:
        e = e.func.value
    if isinstance(e, ast.Name) and e.id in targets:
        return e.id
    if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name) and _names(e.slice) & (targets | index):
        return e.value.id
    return None


def _range_index(it: ast.expr) -> bool:
    while isinstance(it, ast.Call) and getattr(it.func, "id", "") in ("reversed", "list") and len(it.args) == 1:
        it = it.args[0]
    return isinstance(it, ast.Call) and getattr(it.func, "id", "") == "range"


def _mask_of(e: ast.expr, targets: set[str], index: frozenset[str] = frozenset()) -> str | None:
    """`1 - P`, `1.0 - P`, `~P`, `not P`, `P.logical_not()`, `torch.logical_not(P)`: P's base name."""
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Sub) and isinstance(e.left, ast.Constant) \
            and e.left.value == 1:
        return _per_step(e.right, targets, index)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.Invert, ast.Not)):
        return _per_step(e.operand, targets, index)
    if isinstance(e, ast.Call):
        callee = e.func.attr if isinstance(e.func, ast.Attribute) else getattr(e.func, "id", "")
        if callee == "logical_not":
            return _per_step(e.args[0] if e.args else e.func.value, targets, index)  # type: ignore[attr-defined]
    return None


def _factors(e: ast.expr) -> list[ast.expr]:
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        return _factors(e.left) + _factors(e.right)
    return [e]


def _terms(e: ast.expr) -> list[ast.expr]:
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)):
        return _terms(e.left) + _terms(e.right)
    return [e]


def _carries(func: ast.AST) -> list[_Candidate]:
    """Names a reversed loop carries (`x = f(x)`) without the done mask the loop applies elsewhere."""
    out = []
    for loop in ast.walk(func):
        if not (isinstance(loop, ast.For) and _reversed_iter(loop.iter)):
            continue
        targets = _names(loop.target)
        index_names = set(targets)
        idx: frozenset[str] = frozenset()
        if _range_index(loop.iter) and isinstance(loop.target, ast.Name):
            idx = frozenset(targets)
            index_names = set()  # (a range's index is a number: only subscripts by it are per step)
        direct = {id(stmt) for stmt in loop.body}
        body = [n for stmt in loop.body for n in ast.walk(stmt)]
        assigns = [n for n in body if isinstance(n, (ast.Assign, ast.AugAssign))]
        # per-step values added or subtracted somewhere (rewards, values) are not masks
        added: set[str] = set()
        for n in body:
            if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub)):
                for t in (n.left, n.right):
                    base = _per_step(t, index_names, idx)
                    if base is not None:
                        added.add(base)
        masks: set[str] = set()  # the masks' base names
        mask_names: set[str] = set()  # names assigned from a mask (`nextnonterminal = 1.0 - dones[t + 1]`)
        for n in body:
            if isinstance(n, ast.expr):
                base = _mask_of(n, index_names, idx)
                if base is not None:
                    masks.add(base)
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
                for fct in _factors(n):
                    base = _per_step(fct, index_names, idx)
                    if base is not None and base not in added:
                        masks.add(base)
        for a in assigns:
            if isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name):
                v = a.value
                while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in (
                        "float", "to", "type", "double", "half", "unsqueeze", "view", "reshape"):
                    v = v.func.value
                if _mask_of(v, index_names, idx) is not None:
                    mask_names.add(a.targets[0].id)  # (`nextnonterminal = 1.0 - dones[t + 1]`)
        if not masks:
            continue
        mask_bases = masks | mask_names

        def masked(e: ast.AST, index_names: set[str] = index_names, masks: set[str] = masks,
                   mask_bases: set[str] = mask_bases, idx: frozenset[str] = idx) -> bool:
            return any(isinstance(n, ast.expr) and (_mask_of(n, index_names, idx) is not None
                                                   or _per_step(n, index_names, idx) in masks
                                                   or (isinstance(n, ast.Name) and n.id in mask_bases))
                       for n in ast.walk(e))

        carried: dict[str, list[ast.Assign | ast.AugAssign]] = {}
        reset: set[str] = set()
        fresh: set[str] = set()  # names whose first assignment in the body reads nothing of their own
        for a in sorted(assigns, key=lambda a: (a.lineno, a.col_offset)):
            tgt = a.targets[0] if isinstance(a, ast.Assign) and len(a.targets) == 1 else (
                a.target if isinstance(a, ast.AugAssign) else None)
            if isinstance(tgt, ast.Name) and tgt.id not in carried and tgt.id not in fresh and tgt.id not in reset:
                if isinstance(a, ast.Assign) and tgt.id not in _names(a.value):
                    (fresh if id(a) in direct or not isinstance(a.value, ast.Constant) else reset).add(tgt.id)
                else:
                    carried[tgt.id] = []
        carried = {}
        for a in assigns:
            tgt = a.targets[0] if isinstance(a, ast.Assign) and len(a.targets) == 1 else (
                a.target if isinstance(a, ast.AugAssign) else None)
            if not isinstance(tgt, ast.Name) or tgt.id in targets:
                continue
            name = tgt.id
            if isinstance(a, ast.Assign) and isinstance(a.value, ast.Constant):
                reset.add(name)  # (`if done: gae = 0`)
                continue
            value = a.value
            if isinstance(a, ast.AugAssign) or name in _names(value):
                carried.setdefault(name, []).append(a)
        for name, stmts in carried.items():
            if name in reset or name in mask_bases or name in fresh:
                continue
            ok = False
            for a in stmts:
                if isinstance(a, ast.AugAssign):
                    if isinstance(a.op, ast.Mult) and masked(a.value):
                        ok = True
                    continue
                # the terms of the right side that read the carried name must hold a mask
                reads = [t for t in _terms(a.value) if name in _names(t)]
                if reads and all(masked(t) for t in reads):
                    ok = True
            if not ok:
                first = stmts[0]
                out.append(_Candidate("carry", first.lineno, name, _flag_sources(loop, masks),
                                      ast.unparse(first)[:160]))
    return out


def _zip_of(e: ast.expr) -> ast.Call | None:
    while True:
        if isinstance(e, ast.Subscript):
            e = e.value
        elif isinstance(e, ast.Call):
            callee = e.func.attr if isinstance(e.func, ast.Attribute) else getattr(e.func, "id", "")
            if callee == "zip":
                return e
            if callee in ("list", "reversed", "tuple") and len(e.args) == 1:
                e = e.args[0]
            else:
                return None
        else:
            return None


def _flag_sources(loop: ast.For, masks: set[str]) -> list[str]:
    """The names whose live values hold the loop's done flags: a mask that is a loop target comes
    from its place in the iterated `zip(...)`; a subscripted mask is its own source."""
    out: list[str] = []
    z = _zip_of(loop.iter)
    elts = loop.target.elts if isinstance(loop.target, ast.Tuple) else [loop.target]
    for m in sorted(masks):
        pos = next((i for i, t in enumerate(elts) if isinstance(t, ast.Name) and t.id == m), None)
        if pos is not None and z is not None and pos < len(z.args):
            src = z.args[pos]
            while isinstance(src, (ast.Subscript, ast.Attribute)) or (
                    isinstance(src, ast.Call) and getattr(src.func, "id", "") in ("reversed", "list") and src.args):
                src = src.args[0] if isinstance(src, ast.Call) else src.value
            if isinstance(src, ast.Name):
                out.append(src.id)
        elif pos is None:
            out.append(m)
    return out


def analyse(code: types.CodeType) -> list[_Candidate]:
    tree = parsed(code.co_filename)
    if tree is None:
        return []
    if code.co_name == "<module>":  # a script's top level: its statements outside functions and classes
        top = ast.Module(body=[n for n in tree.body if not isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))], type_ignores=[])
        return _carries(top) + _unused_done_fields(top)
    func = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == code.co_name and n.lineno <= code.co_firstlineno <= (n.end_lineno or n.lineno)
                 and (n.lineno == code.co_firstlineno or any(d.lineno == code.co_firstlineno
                                                             for d in n.decorator_list))), None)
    if func is None:
        return []
    return _carries(func) + _unused_done_fields(func)


def _function_of(code: types.CodeType) -> ast.AST | None:
    tree = parsed(code.co_filename)
    if tree is None:
        return None
    return next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == code.co_name and n.lineno <= code.co_firstlineno <= (n.end_lineno or n.lineno)), None)


def helpers(f: types.FrameType) -> list[_Candidate]:
    """Carries in the user's functions the live frame's function calls (`returns =
    compute_gae(rewards, values, dones)`), their flag sources mapped to the caller's arguments."""
    func = _function_of(f.f_code) if f.f_code.co_name != "<module>" else parsed(f.f_code.co_filename)
    if func is None:
        return []
    out: list[_Candidate] = []
    seen: set[types.CodeType] = set()
    for call in ast.walk(func):
        if not isinstance(call, ast.Call):
            continue
        fn: Any = None
        skip = 0
        if isinstance(call.func, ast.Name):
            fn = f.f_locals.get(call.func.id, f.f_globals.get(call.func.id))
        elif isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
            owner = f.f_locals.get(call.func.value.id)
            fn = getattr(type(owner), call.func.attr, None) if owner is not None else None
            skip = 1  # (self)
        fn = getattr(fn, "__func__", fn)
        code = getattr(fn, "__code__", None)
        if not isinstance(code, types.CodeType) or code in seen or code is f.f_code \
                or not is_user_file(code.co_filename):
            continue
        seen.add(code)
        params = list(code.co_varnames[skip:code.co_argcount])
        for c in analyse(code):
            if c.kind != "carry":
                continue
            mapped = []
            for src in c.sources:
                arg: ast.expr | None = None
                if src in params and params.index(src) < len(call.args):
                    arg = call.args[params.index(src)]
                arg = next((k.value for k in call.keywords if k.arg == src), arg)
                if isinstance(arg, ast.Name):
                    mapped.append(arg.id)
            if mapped:
                out.append(_Candidate("carry", c.line, c.name, mapped, c.text,
                                      where=(code.co_filename, code.co_name)))
        if len(seen) >= 16:
            break
    return out


# ---------------------------------------------------------------- runtime evidence
def _flags(value: Any) -> np.ndarray | None:
    """The binary flags a live value holds (a tensor, an array, a list of them), else None."""
    try:
        if isinstance(value, (list, tuple)):
            if not value or len(value) > 100_000:
                return None
            parts = [_flags(v) if not isinstance(v, (bool, int, float, np.bool_, np.number)) else
                     np.asarray([float(v)]) for v in value]
            if any(p is None for p in parts):
                return None
            arr = np.concatenate([p.reshape(-1) for p in parts if p is not None])
        elif isinstance(value, torch.Tensor):
            if value.numel() == 0 or value.numel() > 1_000_000 or value.is_complex():
                return None
            arr = value.detach().reshape(-1).to("cpu", torch.float64).numpy()
        elif isinstance(value, np.ndarray):
            if value.size == 0 or value.size > 1_000_000 or value.dtype.kind not in "biuf":
                return None
            arr = value.reshape(-1).astype(np.float64)
        else:
            return None
    except Exception:
        return None
    if arr.size < 2 or not np.isin(arr, (0.0, 1.0)).all():
        return None
    return arr


class TerminalMasks:
    """At a loss or a backward: the user's functions live on the stack, analysed once each; the
    candidates judged on the frame's live values."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.analysed: dict[types.CodeType, list[_Candidate]] = {}
        self.reported: set[tuple[str, int]] = set()

    def look(self, frame: types.FrameType | None, step: int | None) -> list[Finding]:
        out: list[Finding] = []
        seen = 0
        f = frame
        while f is not None and seen < MAX_FRAMES:
            if is_user_file(f.f_code.co_filename):
                seen += 1
                cands = self.analysed.get(f.f_code)
                if cands is None:
                    if len(self.analysed) >= MAX_FUNCTIONS:
                        return out
                    cands = self.analysed[f.f_code] = analyse(f.f_code) + helpers(f)
                for c in cands:
                    if c.tries >= MAX_TRIES:
                        continue
                    found = self._judge(c, f, step)
                    if found is not None:
                        out.append(found)
                if cands:
                    self.analysed[f.f_code] = [c for c in cands if c.tries < MAX_TRIES]
            f = f.f_back
        return out

    def _judge(self, c: _Candidate, f: types.FrameType, step: int | None) -> Finding | None:
        if c.kind == "unused":
            flags = _flags(f.f_locals.get(c.name))
            if flags is None:
                c.tries = MAX_TRIES  # (not binary flags: not a done field)
                return None
            if self._other_flags_used(f, c):
                c.tries = MAX_TRIES  # (another binary field is used: truncated flags beside terminated ones)
                return None
        else:
            held = [a for a in (_flags(f.f_locals.get(name)) for name in c.sources) if a is not None]
            flags = max(held, key=lambda a: a.size) if held else None
            if flags is None:
                c.tries += 1
                return None
        ends = int(flags.sum())
        c.tries += 1
        if ends == 0 or (c.kind == "unused" and ends == flags.size):
            return None
        c.tries = MAX_TRIES
        key = (c.where[0] if c.where else f.f_code.co_filename, c.line)
        if key in self.reported:
            return None
        self.reported.add(key)
        return _finding(c, f, ends, int(flags.size), step)

    def _other_flags_used(self, f: types.FrameType, c: _Candidate) -> bool:
        tree = parsed(f.f_code.co_filename)
        if tree is None:
            return False
        func = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and n.lineno <= c.line <= (n.end_lineno or n.lineno) and n.name == f.f_code.co_name), None)
        if func is None:
            return False
        stmt = next((n for n in ast.walk(func) if isinstance(n, ast.Assign) and len(n.targets) == 1
                     and isinstance(n.targets[0], ast.Tuple)
                     and any(isinstance(e, ast.Name) and e.id == c.name for e in n.targets[0].elts)), None)
        if stmt is None or not isinstance(stmt.targets[0], ast.Tuple):
            return False
        for e in stmt.targets[0].elts:
            if not isinstance(e, ast.Name):
                continue
            live = f.f_locals.get(e.id)
            if isinstance(live, torch.Tensor) and not (live.is_floating_point() or live.dtype == torch.bool):
                continue  # (integer actions of a two-action task are 0/1 too)
            if e.id != c.name and _flags(live) is not None \
                    and _read_beyond_self(func, e.id):
                flags = _flags(f.f_locals.get(e.id))
                if flags is not None and 0 < flags.sum() < flags.size:
                    return True
        return False


def _finding(c: _Candidate, f: types.FrameType, ends: int, total: int, step: int | None) -> Finding:
    frame = user_frame_of_line(c.where[0], c.line, c.where[1]) if c.where else user_frame_of(f, c.line)
    if c.kind == "unused":
        code, key = "silent.bootstrap_ignores_done", "terminal.unused"
        harm = (f"{ends} of the batch's {total} transitions are terminal ({c.name} = 1) and their targets still "
                f"bootstrap from the next state's value")
    else:
        code, key = "silent.return_crosses_episode_end", "terminal.carry"
        harm = (f"the rollout holds {ends} episode ends among {total} steps; at each, {c.name} carries the next "
                f"episode's sum into the ending one")
    fields = {"name": c.name, "ends": ends, "total": total, "text": c.text}
    evidence = {"name": c.name, "statement": c.text, "terminal_flags": ends, "transitions": total,
                "terminal_share": round(ends / total, 4), "harm": harm}
    return from_catalogue(Category.SILENT, code, key, fields=fields, cause_key=key + ".cause",
                          next_key=key + ".next", frame=frame, evidence=evidence, source_line=True,
                          severity=Severity.WARNING, stage=Stage.LOSS, step=step, parameter=c.name)
