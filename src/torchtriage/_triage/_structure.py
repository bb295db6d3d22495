"""Explanations read from the program's structure, not from the message (issue 12 §3).

  * an optimizer built with no parameters: which model was passed and why it has none (a
    misspelled `__init__`, layers kept in a plain list, weights stored as plain tensors,
    every parameter frozen, a `parameters()` generator already consumed);
  * DDP's "Expected to have finished reduction in the prior iteration": the parameters that
    got no gradient, by name, and the branch of `forward` that uses them;
  * a tensor saved for backward and modified in place: the variable that holds it and the
    line that produced it (exact under anomaly detection, else the assignment in the source).
"""

from __future__ import annotations

import ast
import difflib
import inspect
import os
import re
import textwrap
import types
from typing import Any

import torch
import torch.nn as nn

from .._catalogue import msg
from .._frames import is_user_file
from ._operands import Operand, lines_before, lookup


# ---------------------------------------------------------------- optimizer
def empty_optimizer(m: re.Match[str], ctx: Any) -> tuple[str, dict[str, Any]] | None:
    site = ctx.sites.user
    model: Any = None
    name = "?"
    if site is not None and isinstance(site.node, ast.Call) and site.node.args:
        arg = site.node.args[0]
        if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "parameters":
            found, model = lookup(arg.func.value, site.frame)
            name = ast.unparse(arg.func.value)
            if not found:
                model = None
        elif isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "filter":
            if len(arg.args) == 2 and isinstance(arg.args[1], ast.Call) and isinstance(arg.args[1].func, ast.Attribute):
                found, model = lookup(arg.args[1].func.value, site.frame)
                name = ast.unparse(arg.args[1].func.value)
                if found and isinstance(model, nn.Module) and any(True for _ in model.parameters()):
                    return "gradient.optimizer_empty", {"model": name, "cls": type(model).__name__,
                                                        "reason": msg("triage.optimizer_empty.frozen")}
        else:
            found, value = lookup(arg, site.frame)
            name = ast.unparse(arg)
            if found and isinstance(value, types.GeneratorType):
                return "gradient.optimizer_empty", {"model": name, "cls": "generator",
                                                    "reason": msg("triage.optimizer_empty.consumed")}
            if found and not isinstance(value, nn.Module):
                return "gradient.optimizer_empty", {"model": name, "cls": type(value).__name__,
                                                    "reason": msg("triage.optimizer_empty.unknown")}
    if not isinstance(model, nn.Module):
        return "gradient.optimizer_empty", {"model": name, "cls": "?", "reason": msg("triage.optimizer_empty.unknown")}
    return "gradient.optimizer_empty", {"model": name, "cls": type(model).__name__, "reason": _why_no_parameters(model)}


def _why_no_parameters(model: nn.Module) -> str:
    cls = type(model)
    own: dict[str, Any] = {}
    for klass in cls.__mro__:
        if klass in (nn.Module, object):
            break
        for k, v in vars(klass).items():
            own.setdefault(k, v)
    if "__init__" not in own:
        methods = [k for k in own if callable(own[k])]
        # `__int__`, `_init_`, `__init`, `init`; not `__iter__` (ratio 0.75)
        typo = difflib.get_close_matches("__init__", methods, n=1, cutoff=0.8) or [k for k in methods if k == "init"]
        if typo:
            return msg("triage.optimizer_empty.misspelled_init", cls=cls.__name__, name=typo[0])
        return msg("triage.optimizer_empty.no_init", cls=cls.__name__)
    for k, v in vars(model).items():
        items = list(v.values()) if isinstance(v, dict) else list(v) if isinstance(v, (list, tuple)) else []
        if items and any(isinstance(i, nn.Module) for i in items):
            return msg("triage.optimizer_empty.plain_container", attr=k, kind=type(v).__name__)
        if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter):
            return msg("triage.optimizer_empty.plain_tensor", attr=k)
    if any(True for _ in model.parameters()):
        return msg("triage.optimizer_empty.frozen")
    return msg("triage.optimizer_empty.nothing", cls=cls.__name__)


# ---------------------------------------------------------------- DDP
_INDICES = re.compile(r"Parameter indices which did not receive grad for rank (?P<rank>\d+): (?P<indices>[\d ]+)")
_NAMES = re.compile(r"Parameters which did not receive grad for rank (?P<rank>\d+): (?P<names>[\w., ]+)")


def ddp_unused(m: re.Match[str], ctx: Any) -> tuple[str, dict[str, Any]] | None:
    text = str(ctx.exc)
    ddp = _find_ddp(ctx)
    names: list[str] = []
    hit = _NAMES.search(text)
    if hit:
        names = [n.strip() for n in hit.group("names").split(",") if n.strip()]
    elif (hit := _INDICES.search(text)) is not None and ddp is not None:
        trainable = [n for n, p in ddp.module.named_parameters() if p.requires_grad]
        names = [trainable[int(i)] for i in hit.group("indices").split() if int(i) < len(trainable)]
    branch = _branch_using(ddp.module, names) if ddp is not None and names else None
    step = ctx.step
    fields: dict[str, Any] = {
        "params": ", ".join(names) or "?",
        "when": msg("triage.ddp.step", step=step - 1)
        if isinstance(step, int) and step > 0 else msg("triage.ddp.previous"),
        "branch": (msg("triage.ddp.branch", file=os.path.basename(branch[0]), line=branch[1], source=branch[2])
                   if branch else msg("triage.ddp.no_branch")),
    }
    if branch:
        fields["branch_line"] = f"{branch[0]}:{branch[1]}"
    return "gradient.ddp_unused_parameters", fields


def _find_ddp(ctx: Any) -> Any:
    ddp_cls = getattr(getattr(nn, "parallel", None), "DistributedDataParallel", None)
    if ddp_cls is None:
        return None
    for f, _ in reversed(ctx.frames):
        obj = f.f_locals.get("self")
        if isinstance(obj, ddp_cls):
            return obj
    return None


def _branch_using(model: nn.Module, names: list[str]) -> tuple[str, int, str] | None:
    """(file, line, source) of the `if` in the model's forward that guards the unused submodule."""
    owners = {n.rsplit(".", 1)[0].split(".")[0] for n in names if "." in n}
    try:
        lines, start = inspect.getsourcelines(type(model).forward)
        file = inspect.getsourcefile(type(model).forward) or "?"
    except (OSError, TypeError):
        return None
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp)):
            for sub in ast.walk(node):
                if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self"
                        and sub.attr in owners):
                    line = start + node.lineno - 1
                    return file, line, lines[node.lineno - 1].strip()
    return None


# ---------------------------------------------------------------- in-place producer
def inplace_producer(fields: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """The variable that holds the tensor modified in place, and the line that produced it."""
    version = int(fields.get("version", -1))
    node = fields.get("node")
    shape = re.search(r"\[([\d, ]*)\]\s*$", str(fields.get("tensor", "")))
    want = [int(d) for d in shape.group(1).split(",") if d.strip()] if shape else None
    candidates: list[tuple[int, str, torch.Tensor, types.FrameType]] = []
    for f, _ in reversed(ctx.frames):
        if not is_user_file(f.f_code.co_filename):
            continue
        for name, v in f.f_locals.items():
            if not isinstance(v, torch.Tensor) or v._version != version or v.is_leaf:
                continue
            if want is not None and list(v.shape) != want:
                continue
            gf = v.grad_fn
            # an in-place op rebases the tensor's grad_fn: the node named is where it was made
            exact = node is not None and gf is not None and type(gf).__name__.startswith(str(node))
            candidates.append((0 if exact else 1, name, v, f))
    if not candidates:
        return {"producer": ""}
    _, name, v, f = min(candidates, key=lambda c: c[0])
    line = _anomaly_line(_node_named(v.grad_fn, node)) or _assignment_line(f, name)
    return {"producer": msg("triage.inplace.producer", name=name, where=f" ({line})" if line else ""),
            "modified": Operand.of(name, v)}


def _node_named(grad_fn: Any, node: Any, depth: int = 4) -> Any:
    """The graph node the message names (`Sigmoid`): the tensor's own grad_fn, or, after an
    in-place op rebased it (`MulBackward0`), one of the nodes just below it."""
    if grad_fn is None or node is None or type(grad_fn).__name__.startswith(str(node)):
        return grad_fn
    if depth > 0:
        for nxt, _ in getattr(grad_fn, "next_functions", ()):
            found = _node_named(nxt, node, depth - 1)
            if found is not None and type(found).__name__.startswith(str(node)):
                return found
    return None


def _anomaly_line(grad_fn: Any) -> str | None:
    """Under torch.autograd.detect_anomaly, autograd keeps the forward traceback of each node."""
    tb = getattr(grad_fn, "metadata", {}).get("traceback_") if grad_fn is not None else None
    if not tb:
        return None
    frames = re.findall(r'File "([^"]+)", line (\d+), in \S+\n\s*(.*)', "".join(tb))
    for file, line, source in reversed(frames):
        if is_user_file(file):
            return f"{os.path.basename(file)}:{line} {source.strip()}"
    return None


def _assignment_line(f: types.FrameType, name: str) -> str | None:
    rx = re.compile(rf"^\s*{re.escape(name)}\s*=(?!=)")
    found = None
    for n, text in lines_before(f):
        if rx.match(text):
            found = f"{os.path.basename(f.f_code.co_filename)}:{n} {text.strip()}"
    return found
