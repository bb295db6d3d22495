"""A periodic learning-rate change whose test never comes true (session 13).

Training loops that decay the lr by hand guard the change with a periodic test on a counter:
`if (it + 1) % decay_step == 0: lr *= 0.1` (or rebuild the optimizer, or write
`param_group["lr"]`). The code's own structure says how often the branch should run: once each
time the dividend passes a multiple of the divisor. A test written so that it never holds
(`i + epo * n % decay_step == 0`: `%` binds tighter than `+`) leaves the lr constant while the
code plainly asks for a decay.

Measured, at each optimizer step (one evaluation per step of the session's clock): the user's
frames on the stack whose loop around the current line holds such an `if` (parsed once per code
object, at the first steps; nothing more is done when none is found), the comparison that holds
the `%` evaluated in the frame (only names, attributes, constants, arithmetic, `len()`), its
dividend and divisor. At the end: the dividend passed >= 2 multiples of the divisor, the
comparison held at fewer than half of them (past its start), and no optimizer's lr ever changed
(nor was one built in the branch) -> `dynamics.lr_decay_never_due`, a warning (the lr stayed as it was for the whole run
although the code's own period asked for changes).
"""

from __future__ import annotations

import ast
import linecache
import math
import sys
import types
from typing import Any

import torch

from .._findings import Category, Finding, Stage
from .._frames import UserFrame, is_user_file
from ._common import finding, num
from ._groups import parsed, scope_of

SCAN_STEPS = 3  # steps during which the stack is searched for a periodic branch
MAX_FRAMES = 4
_SAFE = (ast.Expression, ast.Name, ast.Attribute, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp,
         ast.Load, ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.Subscript, ast.Call, ast.List, ast.Tuple,
         ast.Set)


def _safe(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if not isinstance(n, _SAFE):
            return False
        if isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) and n.func.id == "len" and len(n.args) == 1
                                            and not n.keywords):
            return False
        if isinstance(n, ast.Subscript) and not isinstance(n.slice, ast.Constant):
            return False
    return True


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _optimizer_class(name: str) -> bool:
    cls = getattr(torch.optim, name, None)
    return isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)


def changes_lr(body: list[ast.stmt]) -> bool:
    """The statements write a learning rate: `g["lr"] = ...`, `lr *= gamma`, an optimizer built
    anew, `adjust_learning_rate(...)`, `scheduler.step()`."""
    for stmt in body:
        for n in ast.walk(stmt):
            targets: list[ast.AST] = []
            if isinstance(n, ast.Assign):
                targets = list(n.targets)
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)):
                targets = [n.target]
            for t in targets:
                if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "lr":
                    return True
                low = _name(t).lower()
                if low == "lr" or low.endswith("_lr") or low.startswith("lr_") or "learning_rate" in low:
                    return True
            if isinstance(n, ast.Call):
                low = _name(n.func).lower()
                if "learning_rate" in low or low.endswith("_lr") or low.startswith(("adjust_lr", "set_lr",
                                                                                     "update_lr")):
                    return True
                if _optimizer_class(_name(n.func)):
                    return True
                if low == "step" and isinstance(n.func, ast.Attribute) and "sched" in _name(n.func.value).lower():
                    return True
    return False


class _Branch:
    def __init__(self, file: str, node: ast.If, compare: ast.Compare, mod: ast.BinOp) -> None:
        self.file = file
        self.line = node.lineno
        self.body = (node.body[0].lineno, max(getattr(s, "end_lineno", s.lineno) or s.lineno for s in node.body))
        self.test = ast.unparse(node.test)
        self.dividend_src = ast.unparse(mod.left)
        self.code_compare = compile(ast.Expression(compare), file, "eval")
        self.code_dividend = compile(ast.Expression(mod.left), file, "eval")
        self.code_divisor = compile(ast.Expression(mod.right), file, "eval")
        # the compared side as a whole (`step + 1 % k == 0` is `step + (1 % k)`: its counter is outside the `%`)
        side = compare.left if any(m is mod for m in ast.walk(compare.left)) else compare.comparators[0]
        self.whole_src = ast.unparse(side) if side is not mod else ""
        self.code_whole = compile(ast.Expression(side), file, "eval") if side is not mod else None
        self.whole_low = math.inf
        self.whole_high = -math.inf
        self.evals = 0
        self.held = 0
        self.first: Any = None  # the dividend's first value
        self.held_at: set[Any] = set()  # dividend values (past the first) at which the test held
        self.low = math.inf
        self.high = -math.inf
        self.divisor: float | None = None
        self.built_inside = False

    def evaluate(self, f: types.FrameType) -> None:
        g, loc = f.f_globals, f.f_locals
        try:
            held = bool(eval(self.code_compare, g, loc))  # (names, arithmetic and len() only)
            x = eval(self.code_dividend, g, loc)
            k = eval(self.code_divisor, g, loc)
            w = eval(self.code_whole, g, loc) if self.code_whole is not None else x
        except Exception:
            return  # (a name not bound yet: the loop's first lines)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, k, w)) or k <= 0:
            return
        self.whole_low, self.whole_high = min(self.whole_low, w), max(self.whole_high, w)
        self.evals += 1
        self.held += held
        if self.first is None:
            self.first = (x, w)
        elif held and (x, w) != self.first and len(self.held_at) < 64:
            self.held_at.add((x, w))
        self.low, self.high = min(self.low, x), max(self.high, x)
        self.divisor = k

    def due(self) -> tuple[int, str, Any, Any]:
        """Multiples of the divisor the dividend (or the compared side as a whole) passed, not
        counting where it started: (count, the expression, its first and last value)."""
        k = self.divisor
        if not k or self.evals == 0:
            return 0, self.dividend_src, None, None
        inner = int(self.high // k - self.low // k)
        whole = int(self.whole_high // k - self.whole_low // k) if self.code_whole is not None else 0
        if whole > inner:
            return whole, self.whole_src, self.whole_low, self.whole_high
        return inner, self.dividend_src, self.low, self.high

    def verdict(self) -> dict[str, Any] | None:
        due, expr, low, high = self.due()
        if due < 2 or 2 * len(self.held_at) >= due:
            return None
        return {"variant": None, "counter": expr, "low": low, "high": high, "due": due, "held": len(self.held_at),
                "divisor": num(self.divisor), "targets": ""}


def _number(v: Any) -> float | None:
    """A target as the number it names: 30, 30.0, '30' (a value read from a config as text)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            return None
    return None


class _Milestone:
    """`if epoch == decay_epoch:` / `if epoch in milestones:` guarding an lr change: the values
    it names that the counter passed, and whether the test ever held."""

    def __init__(self, file: str, node: ast.If, compare: ast.Compare) -> None:
        self.file = file
        self.line = node.lineno
        self.body = (node.body[0].lineno, max(getattr(s, "end_lineno", s.lineno) or s.lineno for s in node.body))
        self.test = ast.unparse(node.test)
        self.member = isinstance(compare.ops[0], ast.In)
        self.sides = (ast.unparse(compare.left), ast.unparse(compare.comparators[0]))
        self.code_compare = compile(ast.Expression(compare), file, "eval")
        self.code_left = compile(ast.Expression(compare.left), file, "eval")
        self.code_right = compile(ast.Expression(compare.comparators[0]), file, "eval")
        self.evals = 0
        self.held_after = 0
        self.first: Any = None
        self.range = [[math.inf, -math.inf], [math.inf, -math.inf]]  # numeric range of each side
        self.values: list[set[Any]] = [set(), set()]  # distinct values of each side (bounded)

    def evaluate(self, f: types.FrameType) -> None:
        g, loc = f.f_globals, f.f_locals
        try:
            held = bool(eval(self.code_compare, g, loc))
            sides = (eval(self.code_left, g, loc), eval(self.code_right, g, loc))
        except Exception:
            return
        if self.member:
            if not isinstance(sides[1], (list, tuple, set, frozenset, range)) or len(sides[1]) > 64:
                return
            sides = (sides[0], tuple(sides[1]))
        self.evals += 1
        if self.first is None:
            self.first = sides
        elif held and sides != self.first:
            self.held_after += 1
        for i, v in enumerate(sides):
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                r = self.range[i]
                r[0], r[1] = min(r[0], v), max(r[1], v)
            if len(self.values[i]) < 64:
                try:
                    self.values[i].add(v)
                except TypeError:
                    pass

    def verdict(self) -> dict[str, Any] | None:
        if self.held_after or self.evals < 2:
            return None
        # the counter: the side whose numbers moved (the left one of `in`)
        moving = [i for i in (0, 1) if self.range[i][1] > self.range[i][0]]
        if self.member:
            if moving != [0] or len(self.values[1]) != 1:
                return None
            targets = list(next(iter(self.values[1])))
        else:
            if len(moving) != 1 or len(self.values[1 - moving[0]]) != 1:
                return None
            targets = [next(iter(self.values[1 - moving[0]]))]
        c = moving[0]
        low, high = self.range[c]
        passed = [t for t in targets if (n := _number(t)) is not None and low < n <= high]
        if not passed:
            return None
        return {"variant": "target", "counter": self.sides[c], "low": low, "high": high, "due": len(passed),
                "held": 0, "divisor": "", "targets": ", ".join(repr(t) for t in passed[:6])}


def _branches(f: types.FrameType) -> list[_Branch | _Milestone]:
    """Periodic lr-changing `if`s inside the loops around `f`'s current line."""
    code = f.f_code
    tree = parsed(code.co_filename)
    if tree is None:
        return []
    scope = scope_of(tree, code)
    line = f.f_lineno
    out: list[_Branch | _Milestone] = []
    for loop in ast.walk(scope):
        if not isinstance(loop, (ast.For, ast.While)) or not (loop.lineno <= line <= (loop.end_lineno or 0)):
            continue
        for node in ast.walk(loop):
            if not isinstance(node, ast.If) or not changes_lr(node.body):
                continue
            for cmp in ast.walk(node.test):
                if not isinstance(cmp, ast.Compare) or len(cmp.ops) != 1:
                    continue
                if not isinstance(cmp.ops[0], (ast.Eq, ast.In)):
                    continue
                mods = [m for m in ast.walk(cmp) if isinstance(m, ast.BinOp) and isinstance(m.op, ast.Mod)]
                if not _safe(cmp):
                    continue
                if len(mods) == 1 and isinstance(cmp.ops[0], ast.Eq):
                    out.append(_Branch(code.co_filename, node, cmp, mods[0]))
                    break
                if not mods:
                    out.append(_Milestone(code.co_filename, node, cmp))
                    break
    seen: dict[int, _Branch | _Milestone] = {}
    for b in out:
        seen.setdefault(b.line, b)
    return list(seen.values())


class PeriodicBranches:
    def __init__(self) -> None:
        self.scanned: dict[types.CodeType, list[_Branch | _Milestone]] = {}
        self.branches: list[tuple[types.CodeType, _Branch | _Milestone]] = []
        self.scans = 0
        self.last_step = -1
        self.lrs: dict[int, list[float | None]] = {}
        self.lr_changed = False
        self.built: list[UserFrame] = []

    def optimizer_built(self, frames: list[types.FrameType]) -> None:
        for f in frames:
            self.built.append(UserFrame(f.f_code.co_filename, f.f_lineno, f.f_code.co_name))

    def stepped(self, opt: Any, lrs: list[float | None], step: int) -> None:
        before = self.lrs.get(id(opt))
        if before is None:
            self.lrs[id(opt)] = list(lrs)
        elif before != lrs:
            self.lr_changed = True
        if step == self.last_step or (not self.branches and self.scans >= SCAN_STEPS):
            return
        self.last_step = step
        frames: list[types.FrameType] = []
        f: types.FrameType | None = sys._getframe(2)
        while f is not None and len(frames) < MAX_FRAMES:
            if is_user_file(f.f_code.co_filename):
                frames.append(f)
            f = f.f_back
        if self.scans < SCAN_STEPS:
            self.scans += 1
            for fr in frames:
                if fr.f_code not in self.scanned and len(self.scanned) < 32:
                    try:
                        found = self.scanned[fr.f_code] = _branches(fr)
                    except (OSError, SyntaxError, ValueError):
                        found = self.scanned[fr.f_code] = []
                    self.branches += [(fr.f_code, b) for b in found]
        for code, b in self.branches:
            for fr in frames:
                if fr.f_code is code:
                    b.evaluate(fr)
                    break

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        if self.lr_changed:
            return out
        for _, b in self.branches:
            v = b.verdict()
            if v is None:
                continue
            if any(u.file == b.file and b.body[0] <= u.line <= b.body[1] for u in self.built):
                continue  # (an optimizer was built in the branch: it ran)
            lrs = sorted({num(x) for xs in self.lrs.values() for x in xs if x is not None})
            frame = UserFrame(b.file, b.line, "", linecache.getline(b.file, b.line).strip())
            low, high = num(v["low"]), num(v["high"])
            out.append(finding(
                "lr_decay_never_due", variant=v["variant"], category=Category.OTHER, stage=Stage.OPTIMIZER, step=0,
                frame=frame, test=b.test, dividend=v["counter"], low=low, high=high, divisor=v["divisor"],
                due=v["due"], held=v["held"], evals=b.evals, lr=" / ".join(lrs), targets=v["targets"],
                evidence={"test": b.test, "dividend": v["counter"], "dividend_range": [low, high],
                          "divisor": v["divisor"] or None, "targets_passed": v["targets"] or None,
                          "multiples_passed": v["due"], "test_held_past_the_start": v["held"],
                          "evaluations": b.evals, "lr_constant": lrs,
                          "harm": f"the lr stayed at {' / '.join(lrs)} for the whole run while the branch's own "
                                  f"test asked for {v['due']} change(s)"}))
        self.branches = []
        return out
