"""The tensors involved in a failure, read from the frames of its traceback (issue 12 §1).

Two call sites are read: the innermost frame's failing call (inside torch's Python code when
the error came from there, e.g. `F.linear(input, self.weight, self.bias)` in `Linear.forward`)
and the user's own failing call (`torch.dot(a, b)` at the user's line). Python 3.11 records,
for each instruction, the columns of the expression it belongs to (`co_positions`): the
instruction that raised is the call, so its source segment is parsed and its arguments that
are plain names or attribute chains (`x`, `self.weight`) are looked up in that frame's locals.
Nothing is evaluated: no call, no property, no indexing runs on the user's objects.

Each tensor becomes an `Operand`: name, device, dtype, shape, layout, requires_grad, whether
it is a view and whether it is a leaf; metadata only (no values read, no host sync).
"""

from __future__ import annotations

import ast
import dataclasses
import linecache
import os
import types
from typing import Any

import torch
import torch.nn as nn

from .._frames import is_user_file

MAX_OPERANDS = 6
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


@dataclasses.dataclass(frozen=True)
class Operand:
    """One tensor of the failing call, by the name the code gives it."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    layout: str
    requires_grad: bool
    is_view: bool
    is_leaf: bool
    ident: int = dataclasses.field(default=0, compare=False, repr=False)  # id() of the tensor
    named_by_user: bool = dataclasses.field(default=False, compare=False, repr=False)

    @classmethod
    def of(cls, name: str, t: torch.Tensor) -> Operand:
        return cls(name=name, shape=tuple(t.shape), dtype=str(t.dtype).replace("torch.", ""),
                   device=str(t.device), layout=str(t.layout).replace("torch.", ""),
                   requires_grad=bool(t.requires_grad), is_view=bool(t._is_view()), is_leaf=bool(t.is_leaf),
                   ident=id(t))

    @property
    def is_floating(self) -> bool:
        return self.dtype.startswith(("float", "bfloat", "complex"))

    def __str__(self) -> str:
        parts = [f"{self.dtype}{list(self.shape)}", self.device]
        if self.layout != "strided":
            parts.append(self.layout)
        if self.requires_grad:
            parts.append("requires_grad" + ("" if self.is_leaf else " non-leaf"))
        if self.is_view:
            parts.append("view")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["shape"] = list(self.shape)
        del d["ident"], d["named_by_user"]
        return d


@dataclasses.dataclass(frozen=True)
class CallSite:
    """The call an instruction belongs to: its function as written and its argument nodes."""

    function: str  # "torch.dot", "Tensor.sum", "self.head", "matmul" (the @ operator)
    node: ast.AST
    frame: types.FrameType

    def arguments(self, *, starred: bool = True) -> list[tuple[str, Any]]:
        """(name as written, value) of the call's receiver and arguments that are plain names
        (`starred=False`: without `*args`, whose items torch's own code passes on unnamed)."""
        nodes: list[ast.AST] = []
        node = self.node
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute):
                nodes.append(node.func.value)
                root = node.func.value
                while isinstance(root, ast.Call) and isinstance(root.func, ast.Attribute):
                    root = root.func.value  # x.squeeze().sum(1): x, the chain's first tensor
                if root is not node.func.value:
                    nodes.append(root)
            nodes += list(node.args) + [k.value for k in node.keywords]
        elif isinstance(node, ast.BinOp):
            nodes += [node.left, node.right]
        elif isinstance(node, ast.Subscript):
            nodes += [node.value, node.slice]
        out: list[tuple[str, Any]] = []
        flat: list[ast.AST] = []
        for n in nodes:
            flat += list(n.elts) if isinstance(n, (ast.List, ast.Tuple)) else [n]
        for n in flat:
            if isinstance(n, ast.Starred):
                if not starred:
                    continue
                n = n.value
            found, value = lookup(n, self.frame)
            if found:
                out.append((ast.unparse(n), value))
        return out


def lines_before(frame: types.FrameType) -> list[tuple[int, str]]:
    """(line number, text) of the frame's code from its first line up to the running one."""
    first = frame.f_code.co_firstlineno
    return [(n, linecache.getline(frame.f_code.co_filename, n)) for n in range(first, frame.f_lineno)]


def lookup(node: ast.AST, frame: types.FrameType) -> tuple[bool, Any]:
    """The value of a name or attribute chain in `frame`, without running any user code."""
    if isinstance(node, ast.Name):
        for scope in (frame.f_locals, frame.f_globals, frame.f_builtins):
            if node.id in scope:
                return True, scope[node.id]
        return False, None
    if isinstance(node, ast.Attribute):
        found, base = lookup(node.value, frame)
        if not found:
            return False, None
        if isinstance(base, nn.Module):
            for table in ("_parameters", "_buffers", "_modules"):
                d = base.__dict__.get(table) or {}
                if node.attr in d:
                    return True, d[node.attr]
        if isinstance(base, types.ModuleType) or (isinstance(base, nn.Module) and node.attr in base.__dict__):
            return (True, getattr(base, node.attr)) if hasattr(base, node.attr) else (False, None)
        d = getattr(base, "__dict__", None)
        if isinstance(d, dict) and node.attr in d:
            return True, d[node.attr]
    return False, None


def call_at(frame: types.FrameType, lasti: int) -> CallSite | None:
    """The call (or operator, or subscript) that instruction `lasti` of `frame` belongs to."""
    tree = _expression_at(frame, lasti)
    if tree is None:
        return None
    if isinstance(tree, ast.Call):
        found, obj = lookup(tree.func, frame)
        if found and isinstance(obj, type) and issubclass(obj, BaseException):
            return None  # `raise ValueError(...)`: the call that failed is the caller's
        return _callsite(tree, frame)
    # an operator or an indexing is torch's only when a tensor takes part
    if isinstance(tree, ast.BinOp) and _any_tensor((tree.left, tree.right), frame):
        name = {ast.MatMult: "matmul", ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul",
                ast.Div: "div"}.get(type(tree.op), type(tree.op).__name__.lower())
        return CallSite(name, tree, frame)
    if isinstance(tree, ast.Subscript) and _any_tensor((tree.value,), frame):
        return CallSite("Tensor.__getitem__", tree, frame)
    return None


def _any_tensor(nodes: tuple[ast.AST, ...], frame: types.FrameType) -> bool:
    return any(isinstance(lookup(n, frame)[1], torch.Tensor) for n in nodes)


def _expression_at(frame: types.FrameType, lasti: int) -> ast.AST | None:
    positions = getattr(frame.f_code, "co_positions", None)
    if positions is None:  # Python < 3.11: the line's outermost call
        try:
            stmt = ast.parse(linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip())
        except SyntaxError:
            return None
        return next((n for n in ast.walk(stmt) if isinstance(n, ast.Call)), None)
    try:
        line, end_line, col, end_col = list(positions())[lasti // 2]
    except (IndexError, ValueError):
        return None
    if line is None or end_line is None or col is None or end_col is None:
        return None
    lines = [linecache.getline(frame.f_code.co_filename, n) for n in range(line, end_line + 1)]
    if not any(lines):
        return None
    raw = [ln.encode("utf-8") for ln in lines]  # co_positions columns are UTF-8 byte offsets
    seg = raw[0][col:end_col] if len(raw) == 1 else raw[0][col:] + b"".join(raw[1:-1]) + raw[-1][:end_col]
    try:
        return ast.parse(seg.decode("utf-8", "replace").strip(), mode="eval").body
    except SyntaxError:
        return None


def _callsite(node: ast.Call, frame: types.FrameType) -> CallSite:
    func = node.func
    written = ast.unparse(func)
    if isinstance(func, ast.Attribute):
        found, receiver = lookup(func.value, frame)
        if found and isinstance(receiver, torch.Tensor):
            return CallSite(f"Tensor.{func.attr}", node, frame)
        if found and isinstance(receiver, types.ModuleType) and receiver.__name__.startswith("torch"):
            return CallSite(f"{receiver.__name__}.{func.attr}", node, frame)
        if not found and isinstance(func.value, ast.Call):
            # x.squeeze().sum(dim=1): a method of whatever the inner call returned
            return CallSite(f"Tensor.{func.attr}", node, frame)
    found, obj = lookup(func, frame)
    if found and isinstance(obj, nn.Module):
        return CallSite(f"{written} ({type(obj).__name__})", node, frame)
    return CallSite(written, node, frame)


@dataclasses.dataclass(frozen=True)
class Sites:
    """The innermost call (torch's code or the user's) and the user's own failing call."""

    inner: CallSite | None
    user: CallSite | None
    # `gate.sum().backward()`: the tensor the user's method was called on when it is not a plain
    # name, as the method's own frame holds it (`self`), named by the user's expression
    receiver: tuple[str, torch.Tensor] | None = None

    @property
    def function(self) -> str | None:
        """The torch function that failed, as precisely as the frames tell."""
        for site in (self.inner, self.user):
            if site is not None and not site.function.startswith("self."):
                return site.function
        return self.user.function if self.user is not None else None


def sites_of(tb: types.TracebackType | None) -> Sites:
    entries: list[tuple[types.FrameType, int]] = []
    while tb is not None:
        # our own frames (a torch function mode calling `func(*args)`) are not the failing call
        if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_OURS):
            entries.append((tb.tb_frame, tb.tb_lasti))
        tb = tb.tb_next
    if not entries:
        return Sites(None, None)
    inner = call_at(*entries[-1])
    user, receiver = None, None
    for k in range(len(entries) - 1, -1, -1):
        f, lasti = entries[k]
        if is_user_file(f.f_code.co_filename):
            user = call_at(f, lasti) if k != len(entries) - 1 else inner
            if user is not None and k + 1 < len(entries):
                receiver = _receiver_from_callee(user, entries[k + 1][0])
            break
    return Sites(inner, user, receiver)


def _receiver_from_callee(site: CallSite, callee: types.FrameType) -> tuple[str, torch.Tensor] | None:
    """The receiver of `EXPR.method(...)` when EXPR is not a name (nothing is evaluated: the
    method's frame holds it as `self`, when that frame is the method's own)."""
    node = site.node
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    base = node.func.value
    if isinstance(base, (ast.Name, ast.Attribute)) or callee.f_code.co_name != node.func.attr:
        return None
    value = callee.f_locals.get("self")
    return (ast.unparse(base), value) if isinstance(value, torch.Tensor) else None


def operands_of(sites: Sites, extra: list[tuple[str, torch.Tensor]] = ()) -> list[Operand]:  # type: ignore[assignment]
    """The tensors of the failing calls, then `extra` (the running module's inputs)."""
    seen: set[int] = set()
    out: list[Operand] = []

    def add(name: str, value: Any, by_user: bool) -> None:
        if isinstance(value, torch.Tensor) and id(value) not in seen:
            seen.add(id(value))
            try:
                out.append(dataclasses.replace(Operand.of(name, value), named_by_user=by_user))
            except Exception:  # an odd tensor subclass: leave it out, never fail the report
                pass
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value[:MAX_OPERANDS]):
                add(f"{name}[{i}]", v, by_user)

    # The user's names first (`h0`, not torch's `hx`), then the innermost call's own arguments.
    if sites.receiver is not None:
        add(*sites.receiver, True)
    for site in (sites.user, sites.inner):
        if site is not None:
            for name, value in site.arguments(starred=site is sites.user):
                add(name, value, site is sites.user)
    for name, value in extra:
        add(name, value, False)
    return out[:MAX_OPERANDS]
