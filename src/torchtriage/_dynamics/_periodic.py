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
         ast.Load, ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.Subscript, ast.Call)


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


def _branches(f: types.FrameType) -> list[_Branch]:
    """Periodic lr-changing `if`s inside the loops around `f`'s current line."""
    code = f.f_code
    tree = parsed(code.co_filename)
    if tree is None:
        return []
    scope = scope_of(tree, code)
    line = f.f_lineno
    out = []
    for loop in ast.walk(scope):
        if not isinstance(loop, (ast.For, ast.While)) or not (loop.lineno <= line <= (loop.end_lineno or 0)):
            continue
        for node in ast.walk(loop):
            if not isinstance(node, ast.If) or not changes_lr(node.body):
                continue
            for cmp in ast.walk(node.test):
                if not isinstance(cmp, ast.Compare) or len(cmp.ops) != 1 or not isinstance(cmp.ops[0], ast.Eq):
                    continue
                mods = [m for m in ast.walk(cmp) if isinstance(m, ast.BinOp) and isinstance(m.op, ast.Mod)]
                if len(mods) == 1 and _safe(cmp):
                    out.append(_Branch(code.co_filename, node, cmp, mods[0]))
                    break
    seen: dict[int, _Branch] = {}
    for b in out:
        seen.setdefault(b.line, b)
    return list(seen.values())


class PeriodicBranches:
    def __init__(self) -> None:
        self.scanned: dict[types.CodeType, list[_Branch]] = {}
        self.branches: list[tuple[types.CodeType, _Branch]] = []
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
            due, expr, low, high = b.due()
            if due < 2 or 2 * len(b.held_at) >= due:
                continue
            if any(u.file == b.file and b.body[0] <= u.line <= b.body[1] for u in self.built):
                continue  # (an optimizer was built in the branch: it ran)
            lrs = sorted({num(v) for vs in self.lrs.values() for v in vs if v is not None})
            frame = UserFrame(b.file, b.line, "", linecache.getline(b.file, b.line).strip())
            out.append(finding(
                "lr_decay_never_due", category=Category.OTHER, stage=Stage.OPTIMIZER, step=0, frame=frame,
                test=b.test, dividend=expr, low=num(low), high=num(high), divisor=num(b.divisor),
                due=due, held=len(b.held_at), evals=b.evals, lr=" / ".join(lrs),
                evidence={"test": b.test, "dividend": expr, "dividend_range": [num(low), num(high)],
                          "divisor": num(b.divisor), "multiples_passed": due, "test_held": b.held,
                          "test_held_past_the_start": len(b.held_at),
                          "evaluations": b.evals, "lr_constant": lrs,
                          "harm": f"the lr stayed at {' / '.join(lrs)} for the whole run while the branch's own "
                                  f"period asked for {due} change(s)"}))
        self.branches = []
        return out
