"""Param groups whose own settings never take effect (session 13).

An optimizer built from several param groups carries the user's intent in the groups: each
group's `lr`, its weight decay. Two ways that intent is lost while the run looks normal:

  * groups declared with different learning rates (at the optimizer's construction) that run at
    one and the same lr at every optimizer step: a scheduler given one scalar (OneCycleLR's
    `max_lr`, CyclicLR's `base_lr`) or a loop writing one lr into every group replaced the
    per-group rates -> `dynamics.group_lrs_collapsed`, warning (the groups meant to differ
    were identical for the whole run); with the scheduler's construction line when one was made;
    the same when the groups share one `lr` but differ in a key of the user's own that names a
    learning rate (`lr_mul`, `lr_scale`, `learning_rate`): torch.optim never reads a key it does
    not define, so the intent held there takes effect only if the user's code (a scheduler, a
    loop) writes it into `lr` — measured: every step ran one lr in all groups (variant `unread`,
    located at the dict key the user wrote);
  * a group holding no parameter at all whose weight decay differs from the others': the name
    test that was to fill it matched nothing (`n in ["bias", "gamma"]` tests whole names) ->
    `dynamics.empty_param_group`, a warning when the tensors the group was meant for are all in
    the other group (1-D tensors, biases and norm scales, decayed while the no-decay group is
    empty; or weight matrices left undecayed while the decay group is empty), else an info.

Numbers: the lrs are the Python floats the dynamics check reads at each step; the groups'
contents are read once, at construction. The line of an empty group is its dict in the list of
groups the user wrote (the user frames around the optimizer's construction, read with `ast`).
"""

from __future__ import annotations

import ast
import linecache
import types
import weakref
from typing import Any

from .._findings import Category, Finding, Severity, Stage
from .._frames import UserFrame, is_user_file, optimizer_frame
from .._source import parsed
from ._common import finding, num

MIN_STEPS = 10
_REL = 1e-9


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= _REL * max(abs(a), abs(b))


def _lr(v: Any) -> float | None:
    try:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None


class _Opt:
    def __init__(self, opt: Any, declared: list[float | None], live: list[int], frame: UserFrame | None,
                 key: str = "") -> None:
        self.key = key  # the user's own per-group key that held the differing rates ("" : `lr` itself)
        self.ref = weakref.ref(opt)
        self.kind = type(opt).__name__
        self.declared = declared
        self.live = live  # groups holding parameters
        self.frame = frame
        self.steps = 0
        self.equal = 0  # steps at which every live group ran at one positive lr
        self.first: list[float] | None = None
        self.peak: list[float] = []
        self.last: list[float] = []
        self.sched: Any = None  # the scheduler made for this optimizer (its kind and line)


class GroupSettings:
    """Per optimizer: the lrs its groups were declared with and the lrs they ran at; empty groups."""

    def __init__(self, session: Any, made: Any) -> None:
        self.session = session
        self.made = made  # () -> the schedulers made so far (`_unstepped.UnsteppedSchedulers.made`)
        self.opts: dict[int, _Opt] = {}
        self.empty: list[tuple[weakref.ref[Any], dict[str, Any]]] = []

    # ------------------------------------------------------------------ construction
    def created(self, opt: Any, frames: list[types.FrameType]) -> None:
        groups = list(getattr(opt, "param_groups", []))
        if len(groups) < 2 or len(self.opts) >= 16:
            return
        frame = _user_frame(frames[0]) if frames else None
        live = [i for i, g in enumerate(groups) if g.get("params")]
        declared = [_lr(g.get("lr")) for g in groups]
        vals = [declared[i] for i in live]
        if len(live) >= 2 and all(v is not None and v > 0 for v in vals) and not all(
                _same(v, vals[0]) for v in vals):  # type: ignore[arg-type]
            self.opts[id(opt)] = _Opt(opt, declared, live, frame)
        elif len(live) >= 2:
            unread = _unread_lr_key(opt, [groups[i] for i in live])
            if unread is not None:
                key, values = unread
                spot = _key_line(frames, key)
                self.opts[id(opt)] = _Opt(opt, [values[live.index(i)] if i in live else None
                                                for i in range(len(groups))], live, spot or frame, key)
        for k, g in enumerate(groups):
            if not g.get("params"):
                info = _empty_group(self.session, groups, k)
                if info is not None:
                    # (a tensor named by its place, `param_groups[0][3]`: the model is not known yet)
                    known = [n for n in info["meant_names"] if n != "?" and not n.startswith("param_groups[")]
                    if info["kind"] == "1-D" and known and not _named_in_source(
                            frames, known, groups, optimizer_frame(opt)):
                        # no name the user wrote points at the 1-D tensors: the no-decay group may be
                        # meant for tensors this model does not have (a quantizer's scales). (An empty
                        # decay group leaves every matrix undecayed: harm whatever its test was.)
                        info.update(harm=False, meant=0, meant_numel=0, examples=[], kind="")
                    line = _group_line(frames, len(groups), k)
                    info["frame"] = line or frame
                    info["optimizer"] = type(opt).__name__
                    info["steps"] = 0
                    self.empty.append((weakref.ref(opt), info))
                    break

    # ------------------------------------------------------------------ per step
    def stepped(self, opt: Any, lrs: list[float | None]) -> None:
        key = id(opt)
        for ref, info in self.empty:
            if ref() is opt:
                info["steps"] += 1
        t = self.opts.get(key)
        if t is None or t.ref() is not opt or len(lrs) != len(t.declared):
            return
        vals = [lrs[i] for i in t.live]
        if any(v is None for v in vals):
            return
        now: list[float] = vals  # type: ignore[assignment]
        t.steps += 1
        if now[0] > 0 and all(_same(v, now[0]) for v in now):
            t.equal += 1
        if t.first is None:
            t.first, t.peak = list(now), list(now)
            t.sched = next((m for m in self.made().values() if m.opt is not None and m.opt() is opt), None)
        else:
            t.peak = [max(a, b) for a, b in zip(t.peak, now)]
        t.last = list(now)

    # ------------------------------------------------------------------ verdicts
    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        for t in self.opts.values():
            if t.steps < MIN_STEPS or t.equal != t.steps:
                continue
            sched = t.sched
            frame = sched.frame if sched is not None and sched.frame is not None and not t.key else t.frame
            who = sched.kind if sched is not None else ""
            declared = [num(t.declared[i]) for i in t.live]
            if t.key:  # (one entry per distinct value: one group per parameter is common)
                declared = list(dict.fromkeys(declared))
            variant = "unread" if t.key else "scheduler" if who else None
            out.append(finding(
                "group_lrs_collapsed", variant=variant, category=Category.GRADIENT if t.key else Category.OTHER,
                cause="dynamics.group_lrs_collapsed.unread.cause" if t.key else None,
                next_key="dynamics.group_lrs_collapsed.unread.next" if t.key else None, key=t.key,
                stage=Stage.OPTIMIZER, step=0, frame=frame, op=who or t.kind, module=who or None,
                parameter=f"param_groups {', '.join(str(i) for i in t.live)}",
                optimizer=t.kind, scheduler=who, groups=len(t.live), declared=" / ".join(declared),
                steps=t.steps, peak=num(t.peak[0]), last=num(t.last[0]),
                evidence={"optimizer": t.kind, "declared_lr_per_group": declared,
                          "first_lr_per_group": [num(v) for v in t.first or []],
                          "peak_lr_per_group": [num(v) for v in t.peak],
                          "last_lr_per_group": [num(v) for v in t.last],
                          "steps_with_identical_lrs": t.equal, "optimizer_steps": t.steps,
                          "scheduler": who or None, "unread_group_key": t.key or None,
                          "harm": f"the {len(t.live)} groups declared with lrs {' / '.join(declared)} ran at one "
                                  f"identical lr on all {t.steps} optimizer steps"}))
        for ref, info in self.empty:
            opt = ref()
            if opt is not None and any(g.get("params") for g in opt.param_groups if g is info["group"]):
                continue  # (filled later: add_param_group, a list it held)
            steps = info["steps"]
            if not steps:
                continue
            harm = info["harm"]
            ev = {"optimizer": info["optimizer"], "empty_group": info["index"], "groups": info["groups"],
                  "empty_group_settings": info["settings"], "other_settings": info["others"],
                  "tensors_per_group": info["sizes"], "optimizer_steps": steps}
            if harm:
                ev.update(meant_for_tensors=info["meant"], meant_for_elements=info["meant_numel"],
                          meant_for_examples=info["examples"],
                          harm=f"{info['meant']} tensor(s) ({info['meant_numel']} values) the group was meant for ran "
                               f"with {info['others']} instead on all {steps} steps")
            out.append(finding(
                "empty_param_group", variant="meant" if harm else None, category=Category.OTHER,
                severity=Severity.WARNING if harm else Severity.INFO, stage=Stage.OPTIMIZER, step=0,
                frame=info["frame"], op=info["optimizer"], module=info["optimizer"],
                parameter=", ".join(info["examples"][:3]) or f"param_groups[{info['index']}]",
                optimizer=info["optimizer"], index=info["index"], groups=info["groups"],
                settings=info["settings"], others=info["others"], sizes=" / ".join(map(str, info["sizes"])),
                meant=info["meant"], meant_numel=info["meant_numel"], kind=info["kind"], steps=steps,
                evidence=ev))
        self.opts.clear()
        self.empty.clear()
        return out


_LR_WORDS = ("lr", "learning_rate")


def _unread_lr_key(opt: Any, groups: list[dict[str, Any]]) -> tuple[str, list[float]] | None:
    """A key of the user's own (not one of the optimizer's settings) that names a learning rate,
    holds a positive number in every group holding parameters, and differs between them."""
    known = set(getattr(opt, "defaults", {})) | {"params", "initial_lr", "name", "param_names"}
    for key in groups[0]:
        if key in known or not isinstance(key, str) or not any(w in key.lower() for w in _LR_WORDS):
            continue
        values = [_lr(g.get(key)) for g in groups]
        if all(v is not None and v > 0 for v in values) and not all(
                _same(v, values[0]) for v in values):  # type: ignore[arg-type]
            return key, values  # type: ignore[return-value]
    return None


def _key_line(frames: list[types.FrameType], key: str) -> UserFrame | None:
    """The line where the user wrote `key` as a dict key (`{"params": ..., key: ...}`), read in the
    user frames around the optimizer's construction (innermost first): one such line only."""
    for f in frames:
        try:
            tree = parsed(f.f_code.co_filename)
        except (OSError, SyntaxError, ValueError):
            continue
        if tree is None:
            continue
        scope = scope_of(tree, f.f_code)
        lines = {k.lineno for node in ast.walk(scope) if isinstance(node, ast.Dict)
                 for k in node.keys if isinstance(k, ast.Constant) and k.value == key}
        if len(lines) == 1:
            line = lines.pop()
            file = f.f_code.co_filename
            return UserFrame(file, line, f.f_code.co_name, linecache.getline(file, line).strip())
    return None


def _plain(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def _empty_group(session: Any, groups: list[dict[str, Any]], k: int) -> dict[str, Any] | None:
    """What the empty group `k` would have set differently from the groups holding parameters."""
    g = groups[k]
    full = [h for h in groups if h.get("params")]
    if not full:
        return None
    diff = {key: v for key, v in g.items() if key != "params" and _plain(v)
            and any(_plain(h.get(key)) and h.get(key) != v for h in full)}
    if not diff:
        return None
    others = {key: sorted({h.get(key) for h in full}, key=repr) for key in diff}
    tensors = [p for h in full for p in h["params"] if getattr(p, "requires_grad", False)]
    decay = [key for key in diff if "decay" in key.lower() and isinstance(diff[key], (int, float))]
    meant: list[Any] = []
    kind = ""
    for key in decay:
        mine = float(diff[key])
        theirs = [float(v) for h in full if isinstance(v := h.get(key), (int, float))]
        if len(theirs) != len(full):
            continue
        if mine == 0 and all(v > 0 for v in theirs):  # the no-decay group: biases, norm scales
            meant, kind = [p for p in tensors if p.dim() <= 1], "1-D"
        elif mine > 0 and all(v == 0 for v in theirs):  # the decay group: weight matrices
            meant, kind = [p for p in tensors if p.dim() >= 2], "matrix"
        if meant:
            break
    infos = session.param_index.infos()
    names = []
    for p in meant[:256]:
        info = infos.get(id(p))
        names.append(info.qualname if info is not None else "?")
    if "?" in names:  # (an optimizer built before its model is known: the models' own names)
        own = {id(p): n for m in session.models for n, p in m.named_parameters()}
        names = [own.get(id(p), n) for p, n in zip(meant, names)]
    return {"group": g, "index": k, "groups": len(groups), "settings": ", ".join(f"{a}={diff[a]}" for a in diff),
            "others": ", ".join(f"{a}={'/'.join(map(str, others[a]))}" for a in diff),
            "sizes": [len(h.get("params", [])) for h in groups], "harm": bool(meant), "meant": len(meant),
            "meant_numel": sum(p.numel() for p in meant), "examples": names[:4], "meant_names": names,
            "kind": kind}


def _named_in_source(frames: list[types.FrameType], names: list[str], groups: list[dict[str, Any]],
                     built: UserFrame | None = None) -> bool:
    """Whether a string the user wrote where the optimizer was built (the function holding the
    line that built it, the functions of the user frames around the moment it became known, or
    a module's top-level code; and the functions of that file they call) is part of the name of
    a tensor the empty group was meant for (`"bias"`, `"LayerNorm.weight"`): the name test was
    written for them. Group option keys (`"params"`, `"weight_decay"`) do not count."""
    options = {key for g in groups for key in g} | {"params"}
    places: list[tuple[str, Any]] = [(f.f_code.co_filename, f.f_code) for f in frames]
    if built is not None:
        places.insert(0, (built.file, built.line))
    for file, where in places:
        try:
            tree = parsed(file)
        except (OSError, SyntaxError, ValueError):
            continue
        if tree is None:
            continue
        scope = scope_of(tree, where) if isinstance(where, types.CodeType) else _scope_at(tree, where)
        body: list[ast.AST] = [n for n in getattr(scope, "body", []) if not isinstance(n, ast.ClassDef)]
        if scope is tree:
            body = [n for n in body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        called = {n.func.id if isinstance(n.func, ast.Name) else n.func.attr for top in body
                  for n in ast.walk(top) if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))}
        body += [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in called]
        words = {n.value for top in body for n in ast.walk(top) if isinstance(n, ast.Constant)
                 and isinstance(n.value, str) and 2 <= len(n.value) <= 64 and n.value not in options}
        if any(w in name for w in words for name in names):
            return True
    return False


def _scope_at(tree: ast.Module, line: int) -> ast.AST:
    """The innermost function of `tree` holding `line` (the module when none does)."""
    best: ast.AST = tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is tree or node.lineno >= getattr(best, "lineno", 0):
                best = node
    return best


def _user_frame(f: types.FrameType) -> UserFrame:
    code = f.f_code
    file, line = code.co_filename, f.f_lineno
    return UserFrame(file, line, code.co_name, linecache.getline(file, line).strip())


def user_frames(f: types.FrameType | None, limit: int = 4) -> list[types.FrameType]:
    """Up to `limit` frames of the user's code, innermost first, from `f` outward."""
    out: list[types.FrameType] = []
    while f is not None and len(out) < limit:
        if is_user_file(f.f_code.co_filename):
            out.append(f)
        f = f.f_back
    return out


def _group_line(frames: list[types.FrameType], n: int, k: int) -> UserFrame | None:
    """The line of group `k` in the list of `n` group dicts the user wrote, read in the user
    frames around the construction (innermost first)."""
    for f in frames:
        try:
            tree = parsed(f.f_code.co_filename)
        except (OSError, SyntaxError, ValueError):
            continue
        if tree is None:
            continue
        scope = scope_of(tree, f.f_code)
        lists = [node for node in ast.walk(scope) if isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) == n
                 and all(isinstance(e, ast.Dict) and any(isinstance(key, ast.Constant) and key.value == "params"
                                                          for key in e.keys) for e in node.elts)]
        if len(lists) == 1:
            line = lists[0].elts[k].lineno
            file = f.f_code.co_filename
            return UserFrame(file, line, f.f_code.co_name, linecache.getline(file, line).strip())
    return None


def scope_of(tree: ast.Module, code: types.CodeType) -> ast.AST:
    """The function of `code` in `tree` (the module for module-level code)."""
    if code.co_name == "<module>":
        return tree
    for node in ast.walk(tree):
        first = code.co_firstlineno
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name and (
                node.lineno == first or any(d.lineno == first for d in node.decorator_list)):
            return node
    return tree
