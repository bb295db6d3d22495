"""A "best" kept in memory: the running record never moved, or the kept model the live one (session 19).

Model selection in a loop is one decision repeated at every evaluation: ``if score > best_score:``
keep what goes with the score (``best_ckpt = ckpt``, ``best_model = deepcopy(model)``,
``best_epoch = epoch``) and move the record (``best_score = score``); after the loop the kept
object is reported or restored. Two invariants hold for the kept object to be the best seen:

- the record follows the kept object. A record compared but never assigned in the loop (its
  only assignment the initializer before it) lets every evaluation that beats the initial value
  through, so the kept object is simply the last such evaluation's
  (`other.best_checkpoint_regressed`, variant `never_updated`);
- the kept object is a snapshot. ``best_model = model`` (or ``= model.state_dict()``) keeps the
  very module the optimizer goes on training: after the loop it holds the last weights, whatever
  the record says (`checkpoint.snapshot_aliased`, variant `kept`).

Read from the source (`selections`): an ``if`` inside a loop whose test compares a score with a
record, whose body assigns a kept name that is read again after the loop (the report or the
restore), and whose names say it keeps a best (``best``, ``max``, ``min``, ``top``...).

Measured: after each training step that follows an evaluation forward, and once at the end, the
user frames on the stack holding such a loop are read (the score, the record, the kept objects:
names and attribute chains, no call made). Each change of the score is an evaluation. Never
updated: warning when the record stayed at its initial value over `MIN_EVALS` evaluations or
more and the kept object was last taken at an evaluation worse (in the guard's own direction)
than one seen before it. Kept by reference: warning when the kept object is a module an
optimizer trains (or a state dict sharing its storage), an evaluation after the last change of
the record was rejected by the guard, and the module's parameters were written since that
change: the "best" model reported is the last one.

Cost: one stack walk per evaluation (at the next training step); the source parsed once per code object.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import re
import sys
import types
from collections.abc import Mapping
from typing import Any

import torch

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._frames import find_frame, in_user_file, user_frame_of
from .._source import own_nodes, parsed, scope_at
from ._bestguard import _name, resolve_name

MIN_EVALS = 3
MAX_FRAMES = 8
MAX_SAMPLES = 4096
USER_FRAMES = 4  # the step's caller and the user frames above it
_ORDER = (ast.Lt, ast.Gt, ast.LtE, ast.GtE)
_TEST = re.compile(r"(?<![a-z])test(?:ing|set)?(?![a-z])")
_HELD_OUT = re.compile(r"(?<![a-z])(?:val|valid|validation|dev|holdout|heldout)(?![a-z])")
MAX_PASSES = 4096
_INTENT = ("best", "max", "min", "top", "highest", "lowest", "record", "optimal")


@dataclasses.dataclass(frozen=True)
class Selection:
    line: int  # the `if`
    score: str
    record: str
    higher: bool  # the guard takes a score above the record
    kept: tuple[tuple[str, int], ...]  # (kept name, line of its assignment in the guard)
    loop: tuple[int, int]
    initialized: int | None  # the record's only assignment (before the loop) when the loop never assigns it
    source: str | None = None  # the iterable of the loop in the same pass that sums what the score is made of
    restores: bool = False  # a `load_state_dict` / `torch.load` after the loop: the kept file is read back


@dataclasses.dataclass
class Sample:
    step: int
    score: float
    record: float | None
    kept: tuple[Any, ...]  # identities of the kept objects
    aliased: tuple[int, ...]  # per kept: parameter-version sum of the trained module it is, or -1


def _intent(text: str) -> bool:
    words = text.lower().replace(".", "_").replace("[", "_").replace("]", "_").replace("'", "_").split("_")
    return any(w.startswith(i) or w.endswith(i) for w in words if w for i in _INTENT)


def _root(text: str) -> str:
    for sep in (".", "["):
        text = text.split(sep, 1)[0]
    return text


def _targets(n: ast.AST) -> list[ast.expr]:
    if isinstance(n, ast.Assign):
        out: list[ast.expr] = []
        for t in n.targets:
            out.extend(t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])
        return out
    if isinstance(n, (ast.AugAssign, ast.AnnAssign)):
        return [n.target]
    if isinstance(n, (ast.For, ast.AsyncFor)):
        t = n.target
        return list(t.elts) if isinstance(t, (ast.Tuple, ast.List)) else [t]
    if isinstance(n, ast.NamedExpr):
        return [n.target]
    return []


def _assigned_lines(tree: ast.AST, name: str) -> list[int] | None:
    """Lines that bind `name` anywhere in the file; None when a `global` / `nonlocal` names it
    (a function may set it)."""
    out: list[int] = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names:
            return None
        for t in _targets(n):
            if isinstance(t, ast.Name) and t.id == name:
                out.append(getattr(n, "lineno", 0))
    return out


def _within(n: ast.AST, lo: int, hi: int) -> bool:
    return lo <= getattr(n, "lineno", -1) <= hi


def selections(tree: ast.Module, scope: ast.AST) -> tuple[Selection, ...]:
    nodes = own_nodes(scope)
    loops = [n for n in nodes if isinstance(n, (ast.For, ast.AsyncFor, ast.While))]
    out: list[Selection] = []
    for g in nodes:
        if not isinstance(g, ast.If):
            continue
        test = _comparison(g.test)
        if test is None:
            continue
        inside = [lp for lp in loops if lp.lineno < g.lineno <= (lp.end_lineno or lp.lineno)]
        if not inside:
            continue
        loop = max(inside, key=lambda lp: lp.lineno)  # the innermost loop holding the guard
        lo, hi = loop.lineno, loop.end_lineno or loop.lineno
        left, right = _name(test.left), _name(test.comparators[0])
        if left is None or right is None:
            continue
        body = [n for s in g.body for n in ast.walk(s)]
        assigned_in_loop = {_name(t) for n in nodes if _within(n, lo, hi) for t in _targets(n)}
        assigned_in_loop |= {_root(x) for x in assigned_in_loop if x}
        # the record: the side the guard's body sets from the other; else the side the loop never sets
        sets = {(_name(t), ast.unparse(n.value)) for n in body if isinstance(n, ast.Assign)
                for t in _targets(n) if _name(t) is not None}
        if any(t == left and right in v for t, v in sets):
            score, record = right, left
        elif any(t == right and left in v for t, v in sets) \
                or (_root(right) not in assigned_in_loop and _root(left) in assigned_in_loop):
            score, record = left, right
        elif _root(left) not in assigned_in_loop and _root(right) in assigned_in_loop:
            score, record = right, left
        else:
            continue
        op = test.ops[0]
        higher = isinstance(op, (ast.Gt, ast.GtE)) == (score == left)
        kept: list[tuple[str, int]] = []
        for n in body:
            if not isinstance(n, ast.Assign) or len(n.targets) != 1 or isinstance(n.value, ast.Constant):
                continue
            k = _name(n.targets[0])
            if k is None or k in (record, score) or _root(k) == _root(score):
                continue
            kept.append((k, n.lineno))
        if not kept:
            continue
        after = {ast.unparse(n) for n in nodes if getattr(n, "lineno", 0) > hi
                 and isinstance(n, (ast.Name, ast.Attribute)) and isinstance(getattr(n, "ctx", None), ast.Load)}
        kept = [(k, line) for k, line in kept if k in after]
        if not kept or not (_intent(record) or any(_intent(k) for k, _ in kept)):
            continue
        initialized = None
        if isinstance(test.left if record == left else test.comparators[0], ast.Name):
            lines = _assigned_lines(tree, record)
            if lines and not any(lo <= ln <= hi for ln in lines):
                initialized = max(ln for ln in lines if ln < lo) if any(ln < lo for ln in lines) else None
        restores = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                       and n.func.attr in ("load_state_dict", "load") and getattr(n, "lineno", 0) > hi for n in nodes)
        out.append(Selection(g.lineno, score, record, higher, tuple(kept), (lo, hi), initialized,
                             _source(nodes, score, lo, g.lineno), restores))
    return tuple(out)


def _comparison(test: ast.expr) -> ast.Compare | None:
    """The guard's order comparison of two names (`score < best`, or the first of an `and`)."""
    for c in test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]:
        if isinstance(c, ast.Compare) and len(c.ops) == 1 and isinstance(c.ops[0], _ORDER) \
                and _name(c.left) is not None and _name(c.comparators[0]) is not None:
            return c
    return None


def _source(nodes: list[ast.AST], score: str, lo: int, guard: int) -> str | None:
    """The iterable of the `for` (between the selection loop's start and the guard) whose body adds
    into a name the score is computed from (`epoch_loss = running / n` after `running += ...`)."""
    names = {score}
    assigns = [n for n in nodes if isinstance(n, ast.Assign) and lo <= n.lineno < guard]
    for a in sorted(assigns, key=lambda n: -n.lineno):
        if any(_name(t) in names for t in _targets(a)):
            names |= {m.id for m in ast.walk(a.value) if isinstance(m, ast.Name)}
    for n in nodes:
        if isinstance(n, (ast.For, ast.AsyncFor)) and lo < n.lineno < guard:
            for m in ast.walk(n):
                if isinstance(m, ast.AugAssign) and isinstance(m.target, ast.Name) and m.target.id in names:
                    it = n.iter.args[0] if isinstance(n.iter, ast.Call) and n.iter.args else n.iter
                    return ast.unparse(it)
    for a in assigns:  # `acc, auc, loss = val_loop(model, val_loader)`: the names the call is given
        if isinstance(a.value, ast.Call) and any(_name(t) == score for t in _targets(a)):
            given = [x for x in [*a.value.args, *(k.value for k in a.value.keywords)]
                     if isinstance(x, (ast.Name, ast.Attribute))]
            if given:
                return ",".join(ast.unparse(x) for x in given)
    return None


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, torch.Tensor):
        if v.numel() == 1 and v.device.type == "cpu" and (v.dtype.is_floating_point or not v.dtype.is_complex):
            x = float(v.detach())
            return x if math.isfinite(x) else None
        return None
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return None
    if isinstance(v, (np.floating, np.integer)):
        x = float(v)
        return x if math.isfinite(x) else None
    return None


def _ident(v: Any) -> Any:
    x = _number(v)
    if x is not None:
        return ("n", x)
    if v is None or isinstance(v, str):
        return ("v", v)
    return ("id", id(v))


class BestRecords:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.codes: dict[tuple[types.CodeType, int], tuple[Selection, ...]] = {}
        self.frames: dict[int, types.FrameType] = {}
        self.samples: dict[tuple[int, int], list[Sample]] = {}  # (id frame, guard line) -> samples
        self.kinds: dict[tuple[int, int], tuple[Selection, types.FrameType]] = {}
        self.evaluated = False
        self.loaders: dict[tuple[int, int], tuple[Any, str]] = {}  # selection -> the DataLoader its score is
        # computed over, and its name
        self.passes: list[tuple[int, int, frozenset[tuple[int, int]], frozenset[tuple[int, int]]]] = []

    def install(self) -> None:
        from .._loaderstream import stream

        stream(self.session).listen("step_ledger.best_records", self)

    def on_begin(self, it: Any, loader: Any) -> None:
        """A DataLoader pass begins (an epoch: the guard of the one before has run): the frames are read,
        and the selections whose loop is running now noted, with those seen before."""
        self._walk()
        if not self.kinds or len(self.passes) >= MAX_PASSES:
            return
        inside = frozenset(k for k, (sel, f) in self.kinds.items()
                           if _on_stack(f) and sel.loop[0] <= f.f_lineno <= sel.loop[1])
        self.passes.append((id(loader), id(getattr(loader, "dataset", None)), inside, frozenset(self.kinds)))

    def evaluation_forward(self) -> None:
        self.evaluated = True

    def stepped(self) -> None:
        if not self.evaluated:
            return
        self.evaluated = False
        self._walk()

    def _walk(self) -> None:
        f = find_frame(in_user_file, sys._getframe(3), depth=64)
        seen = 0
        while f is not None and seen < USER_FRAMES:
            seen += 1
            self._look(f)
            f = find_frame(in_user_file, f.f_back, depth=64)

    def _selections(self, f: types.FrameType) -> tuple[Selection, ...]:
        code = f.f_code
        scope_key = (code, code.co_firstlineno)
        sels = self.codes.get(scope_key)
        if sels is None:
            sels = ()
            try:
                tree = parsed(code.co_filename)
                scope = scope_at(tree, code, f.f_lineno) if tree is not None else None
                if tree is not None and scope is not None:
                    sels = selections(tree, scope)
            except Exception:  # a source we cannot read: nothing to follow
                sels = ()
            if len(self.codes) < 1024:
                self.codes[scope_key] = sels
        return sels

    def _look(self, f: types.FrameType) -> None:
        sels = self._selections(f)
        if not sels:
            return
        for sel in sels:
            if not sel.loop[0] <= f.f_lineno <= sel.loop[1]:
                continue
            if id(f) not in self.frames:
                if len(self.frames) >= MAX_FRAMES:
                    return
                self.frames[id(f)] = f
            self._sample(f, sel)

    def _sample(self, f: types.FrameType, sel: Selection) -> None:
        key = (id(f), sel.line)
        score = _number(resolve_name(sel.score, f))
        if score is None:
            return
        record = _number(resolve_name(sel.record, f))
        kept = []
        aliased = []
        for k, _ in sel.kept:
            v = resolve_name(k, f)
            kept.append(_ident(v))
            aliased.append(self._trained_version(v))
        rows = self.samples.setdefault(key, [])
        self.kinds[key] = (sel, f)
        if sel.source is not None and key not in self.loaders:
            from torch.utils.data import DataLoader

            for text in sel.source.split(","):
                it = resolve_name(text, f)
                if isinstance(it, DataLoader):
                    self.loaders[key] = (it, text)
                    break
        if len(rows) < MAX_SAMPLES:
            rows.append(Sample(int(self.session.step), score, record, tuple(kept), tuple(aliased)))

    def _trained_version(self, v: Any) -> int:
        """The parameter-version sum of the trained module `v` is (or whose storage the state dict `v`
        shares), or -1."""
        index = self.session.param_index
        if isinstance(v, torch.nn.Module):
            params = list(v.parameters())
            if not params or not any((i := index.info(p)) is not None and i.optimizer is not None for p in params):
                return -1
            return sum(p._version for p in params)
        if isinstance(v, Mapping) and v:
            for model in self.session.models:
                named = dict(model.named_parameters())
                held = [(n, t) for n, t in v.items() if isinstance(t, torch.Tensor) and n in named]
                if not held or any(t.data_ptr() != named[n].data_ptr() for n, t in held):
                    continue
                ps = [named[n] for n, _ in held]
                if any((i := index.info(p)) is not None and i.optimizer is not None for p in ps):
                    return sum(p._version for p in ps)
        return -1

    # ------------------------------------------------------------------ judging
    def end(self) -> list[Finding]:
        for sel, f in list(self.kinds.values()):
            self._sample(f, sel)  # the frame's last values (a returned frame keeps its locals)
        out: list[Finding] = []
        for key, rows in self.samples.items():
            sel, f = self.kinds[key]
            evals = _evaluations(rows)
            found = self._never_updated(sel, f, evals) or self._kept_alias(sel, f, evals)
            if found is not None:
                out.append(found)
            found = self._on_test(key, sel, f, evals)
            if found is not None:
                out.append(found)
        self.frames.clear()
        self.loaders.clear()
        self.kinds.clear()  # (the frames' locals are let go)
        return out

    def _never_updated(self, sel: Selection, f: types.FrameType, evals: list[tuple[Sample, bool]]) -> Finding | None:
        if sel.initialized is None or len(evals) < MIN_EVALS:
            return None
        records = {s.record for s, _ in evals}
        if len(records) != 1:
            return None
        better = (lambda a, b: a > b) if sel.higher else (lambda a, b: a < b)
        kept_at = None
        for i, (_, taken) in enumerate(evals):
            if taken:
                kept_at = i
        if kept_at is None:
            return None
        kept = evals[kept_at][0]
        top = evals[0][0]
        for s, _ in evals[: kept_at + 1]:
            if better(s.score, top.score):
                top = s
        if not better(top.score, kept.score) or abs(top.score - kept.score) <= 1e-9 * max(1.0, abs(top.score)):
            return None
        replaced_worse = 0
        run = evals[0][0].score
        for s, taken in evals[1:]:
            if taken and better(run, s.score):
                replaced_worse += 1
            if better(s.score, run):
                run = s.score
        name, line = sel.kept[0]
        frame = user_frame_of(f, line)
        scores = [round(s.score, 6) for s, _ in evals]
        evidence = {"score": sel.score, "record": sel.record, "record_value": evals[0][0].record,
                    "record_initialized_at_line": sel.initialized, "guard_line": sel.line,
                    "better": "higher" if sel.higher else "lower",
                    "scores_seen": scores[:16] + (["..."] if len(scores) > 16 else []),
                    "steps": [s.step for s, _ in evals][:16], "best_score": round(top.score, 6),
                    "best_step": top.step, "kept_score": round(kept.score, 6), "kept_step": kept.step,
                    "replacements_by_a_worse_score": replaced_worse}
        fields = {"record": sel.record, "score": sel.score, "kept": name, "evals": len(evals),
                  "value": f"{evals[0][0].record:.6g}" if evals[0][0].record is not None else "?",
                  "init": sel.initialized, "guard": sel.line, "best": f"{top.score:.6g}", "best_step": top.step,
                  "last": f"{kept.score:.6g}", "last_step": kept.step, "worse": replaced_worse}
        return from_catalogue(Category.OTHER, "other.best_checkpoint_regressed", "bestrecord.never_updated",
                              fields=fields, cause_key="bestrecord.never_updated.cause",
                              next_key="bestrecord.never_updated.next", frame=frame, evidence=evidence,
                              source_line=True, severity=Severity.WARNING, stage=Stage.PARAMETER,
                              step=kept.step, parameter=sel.record)

    def _on_test(self, key: tuple[int, int], sel: Selection, f: types.FrameType,
                 evals: list[tuple[Sample, bool]]) -> Finding | None:
        """The score that chose the kept model is summed over a loader named for the test split, and
        that loader (or its dataset) is evaluated again after the selection loop: the figure reported
        for the test split is the best of the epochs it chose."""
        found = self.loaders.get(key)
        if found is None or len(evals) < 2:
            return None
        loader, source = found
        named = (source + " " + sel.score).lower()
        if not _TEST.search(named) or _HELD_OUT.search(source.lower()):
            return None  # (a validation split chose; a validation loader over the test set is `data.split_overlap`)
        dataset = getattr(loader, "dataset", None)
        after = [p for p in self.passes if (p[0] == id(loader) or (dataset is not None and p[1] == id(dataset)))
                 and key in p[3] and key not in p[2]]
        if not after:
            return None
        chosen = None
        for i, (s, _) in enumerate(evals):
            if s.record is not None and abs(s.record - s.score) <= 1e-9 * max(1.0, abs(s.score)):
                chosen = i
        if chosen is None or chosen == len(evals) - 1:
            return None  # the last evaluation was kept: the choice moved nothing
        picked, last = evals[chosen][0], evals[-1][0]
        frame = user_frame_of(f, sel.line)
        evidence = {"score": sel.score, "summed_over": source, "record": sel.record, "guard_line": sel.line,
                    "evaluations": len(evals), "selected_score": round(picked.score, 6),
                    "selected_step": picked.step, "last_score": round(last.score, 6), "last_step": last.step,
                    "scores_seen": [round(s.score, 6) for s, _ in evals][:16],
                    "passes_over_it_after_selection": len(after), "function": f.f_code.co_name}
        fields = {"score": sel.score, "loader": source, "record": sel.record, "evals": len(evals),
                  "picked": f"{picked.score:.6g}", "step": picked.step, "last": f"{last.score:.6g}",
                  "last_step": last.step, "function": f.f_code.co_name}
        return from_catalogue(Category.DATA, "data.test_selected", "bestrecord.on_test", fields=fields,
                              cause_key="bestrecord.on_test.cause", next_key="bestrecord.on_test.next",
                              frame=frame, evidence=evidence, source_line=True, severity=Severity.WARNING,
                              stage=Stage.DATA, step=picked.step, module=f.f_code.co_name)

    def _kept_alias(self, sel: Selection, f: types.FrameType, evals: list[tuple[Sample, bool]]) -> Finding | None:
        if len(evals) < 2 or sel.restores:
            return None  # (weights loaded after the loop: the saved best may be what is evaluated)
        last = evals[-1][0]
        for j, (name, line) in enumerate(sel.kept):
            if last.aliased[j] < 0:
                continue
            # the last evaluation that moved the record: the selection
            chosen = None
            for i, (s, _) in enumerate(evals):
                if i and s.record != evals[i - 1][0].record:
                    chosen = i
                elif i == 0 and s.record is not None and abs(s.record - s.score) <= 1e-12 * max(1.0, abs(s.score)):
                    chosen = 0
            if chosen is None:
                continue
            sel_sample = evals[chosen][0]
            rejected = [s for s, _ in evals[chosen + 1:] if s.record == sel_sample.record
                        and abs(s.score - (s.record or 0.0)) > 1e-12]
            if not rejected or sel_sample.aliased[j] < 0 or last.aliased[j] <= sel_sample.aliased[j]:
                continue
            frame = user_frame_of(f, line)
            evidence = {"kept": name, "record": sel.record, "score": sel.score, "guard_line": sel.line,
                        "selected_score": round(sel_sample.score, 6), "selected_step": sel_sample.step,
                        "rejected_evaluations_after": len(rejected),
                        "rejected_scores": [round(s.score, 6) for s in rejected][:16],
                        "parameter_writes_since_selection": last.aliased[j] - sel_sample.aliased[j],
                        "last_step": last.step}
            fields = {"kept": name, "record": sel.record, "score": f"{sel_sample.score:.6g}",
                      "step": sel_sample.step, "rejected": len(rejected), "now": last.step,
                      "writes": last.aliased[j] - sel_sample.aliased[j]}
            return from_catalogue(Category.OTHER, "checkpoint.snapshot_aliased", "bestrecord.kept_alias",
                                  fields=fields, cause_key="bestrecord.kept_alias.cause",
                                  next_key="bestrecord.kept_alias.next", frame=frame, evidence=evidence,
                                  source_line=True, severity=Severity.WARNING, stage=Stage.PARAMETER,
                                  step=sel_sample.step, parameter=name)
        return None


def _on_stack(frame: types.FrameType) -> bool:
    f: types.FrameType | None = sys._getframe(1)
    while f is not None:
        if f is frame:
            return True
        f = f.f_back
    return False


def _evaluations(rows: list[Sample]) -> list[tuple[Sample, bool]]:
    """The samples where the score changed (an evaluation ran since), each with whether a kept
    object was taken since the sample before."""
    out: list[tuple[Sample, bool]] = []
    prev: Sample | None = None
    for s in rows:
        if prev is None:
            out.append((s, any(k != ("v", None) for k in s.kept)))
        elif s.score != prev.score:
            out.append((s, s.kept != prev.kept))
        prev = s
    return out
