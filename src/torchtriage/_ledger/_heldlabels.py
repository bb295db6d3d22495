"""Held-out labels in a training loss (issue 25): evaluation samples never reach an optimizer step.

Two ways the labels of held-out samples feed a loss that is backpropagated and stepped, seen on a
library loss (`F.*`, an `nn` loss module) computed with gradients on:

* **a loop over held-out data** (`for data in test_loader:`): the loss's target is a batch the
  loop yields (the loop's own variable, or a field of it: `data.graph_y`). The loop is the
  innermost `for` of the user's frame around the loss line (read with `ast`, once per line); its
  iterable names held-out data as a word of its own (`test_loader`, `val_batches`; not
  `train_val_loader`). An evaluation cell that calls `loss.backward()` and `optimizer.step()`
  trains on the test set before scoring it;
* **a held-out mask over a full-batch loss** (a graph's nodes): the frame holds a mask or index
  list named held-out (`test_mask`, `val_idx`, or `data.test_mask`) over exactly the loss's rows,
  and the loss takes every row (no `reduction="none"` weighting them afterwards, the held-out
  rows' labels not `ignore_index`): the labels the mask holds out are trained on.

The harm is measured: the loss line's calls whose graph a backward reached (`_reach`) and that a
step of an optimizer holding the forward's model's parameters followed (a temperature fitted on
validation labels trains no model). Examined on a line's first `EXAMINED` calls (an `ast` read and, for a
mask, one host read of its counts); afterwards a flagged line costs one hook per call.
Quiet: the same loop without backward (an evaluation with gradients on), losses without the
batch's labels (entropy minimization at test time, pseudo-labels), the support set of a few-shot
test task (`support` in the loop or target), a loss over the training mask's rows.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
import types
import weakref
from typing import TYPE_CHECKING, Any

import torch

from .._frames import UserFrame, in_user_file, released_locals, user_frame_of, user_frame_of_line, user_stack_frame
from .._reach import when_reached
from .._source import parsed
from ._heldnames import SPLIT
from ._make import finding

if TYPE_CHECKING:
    from ._checker import DataLedger

EXAMINED = 3  # calls examined per loss line
FRAMES = 3  # user frames searched for the held-out loop
MIN_ROWS = 16  # a full-batch loss over fewer rows is no node table
_HELD = SPLIT
_MASK = re.compile(r"(?<![a-z])(?:val|valid|validation|test|dev|holdout)_?"
                   r"(?:mask|idx|index|indices|ids|nodes)(?![a-z])")
_MASK_ATTRS = ("test_mask", "val_mask", "valid_mask", "test_idx", "val_idx")
_ADAPT = ("support", "train")  # a few-shot task's support set adapts; a train+val loop trains


@dataclasses.dataclass(eq=False)
class _Line:
    kind: str  # "loop" or "mask"
    frame: UserFrame  # the loop over held-out data, or the loss line
    loss: UserFrame  # the loss line
    name: str  # the loop's iterable, or the mask's name
    held_rows: int = 0  # mask: held-out rows whose labels the loss takes
    rows: int = 0  # the loss's rows per call (mask: all of them)
    calls: int = 0
    reached: int = 0
    stepped: int = 0  # optimizer steps after a reached call
    pending: bool = False
    model: Any = None  # (weakly) the model whose forward the loss followed


class HeldLabels:
    def __init__(self, ledger: DataLedger) -> None:
        self.ledger = ledger
        self.lines: dict[tuple[str, int], _Line] = {}
        self.examined: dict[tuple[str, int], int] = {}
        self.active = True
        self.model: Any = None  # (weakly) the latest root model called
        self.holds: dict[tuple[int, int], bool] = {}  # (optimizer, model) ids -> steps its parameters
        self.inputs: set[int] = set()  # ids of the latest root forward's tensor arguments

    def on_forward(self, model: torch.nn.Module) -> None:
        if self.model is None or self.model() is not model:
            self.model = weakref.ref(model)

    def on_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The latest root forward's tensor arguments (by id): a loss whose target is one of them
        reconstructs its input (an autoencoder over a graph's features), no labels."""
        self.inputs = {id(a) for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)}

    def on_loss(self, call: Any) -> None:
        target, out = call.target, call.output
        if not isinstance(target, torch.Tensor) or not isinstance(out, torch.Tensor) or out.grad_fn is None:
            return
        if not torch.is_grad_enabled() or target.dim() == 0:
            return
        f = user_stack_frame(2)
        if f is None:
            return
        key = (f.f_code.co_filename, f.f_lineno)
        line = self.lines.get(key)
        if line is None:
            n = self.examined.get(key, 0)
            if n >= EXAMINED:
                return
            self.examined[key] = n + 1
            line = _examine(f, call, self.inputs)
            if line is None:
                return
            line.model = self.model
            self.lines[key] = line
        line.calls += 1
        line.rows = max(line.rows, int(target.shape[0]))

        def arrived() -> None:
            if self.active:
                line.reached += 1
                line.pending = True

        when_reached(out, arrived)

    def on_step(self, optimizer: torch.optim.Optimizer) -> None:
        """An optimizer steps: a pending line's loss trained its model when the optimizer holds
        that model's parameters (a temperature fitted on validation labels trains no model)."""
        for line in self.lines.values():
            if line.pending:
                line.pending = False
                if self._steps(optimizer, line.model() if line.model is not None else None):
                    line.stepped += 1

    def _steps(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module | None) -> bool:
        if model is None:
            return True  # (the model is gone: the step is counted)
        key = (id(optimizer), id(model))
        got = self.holds.get(key)
        if got is None:
            mine = {id(p) for p in model.parameters()}
            got = self.holds[key] = any(id(p) in mine for g in optimizer.param_groups for p in g["params"])
        return got

    def end(self) -> list[Any]:
        self.active = False
        out = []
        for line in self.lines.values():
            if not line.stepped:
                continue
            severity = "error" if line.stepped >= 2 else "warning"
            loss = f"{line.loss.file}:{line.loss.line}"
            evidence = {"held_out": line.name, "loss_at": loss, "loss_calls": line.calls,
                        "backpropagated": line.reached, "optimizer_steps": line.stepped, "rows_per_call": line.rows}
            fields = {"name": line.name, "loss_at": loss, "steps": line.stepped, "calls": line.reached}
            if line.kind == "mask":
                evidence["held_out_rows"] = line.held_rows
                fields.update(held=line.held_rows, rows=line.rows)
            out.append(finding("heldout_trained", f"held_{line.kind}", severity, line.frame, fields, evidence))
        return out


def _examine(f: types.FrameType, call: Any, inputs: set[int]) -> _Line | None:
    target = call.target
    found = _held_loop(f, target)
    if found is not None:
        loop, name = found
        return _Line("loop", loop, user_frame_of(f), name)
    if id(target) in inputs or (target._base is not None and id(target._base) in inputs):
        return None  # the target is the model's input: a reconstruction, no labels held out
    return _held_mask(f, call)


def _held_loop(f: types.FrameType | None, target: torch.Tensor) -> tuple[UserFrame, str] | None:
    """The loop over held-out data around the loss (`data_loop`) whose loop variables hold the
    loss's target."""
    found = data_loop(f)
    if found is None:
        return None
    frame, (line, iterable, names) = found
    text = iterable.lower()
    if not _HELD.search(text) or any(w in text for w in _ADAPT):
        return None
    scope = released_locals(frame)
    for n in names:
        if "support" not in n.lower() and _holds(scope.get(n), target):
            return user_frame_of_line(frame.f_code.co_filename, line, frame.f_code.co_name), iterable
    return None


def held_loop_frame(f: types.FrameType | None) -> UserFrame | None:
    """The line of the loop over held-out data (its iterable named held-out, `_ADAPT` aside) that
    runs the current call, or None."""
    found = data_loop(f)
    if found is None:
        return None
    frame, (line, iterable, _) = found
    text = iterable.lower()
    if not _HELD.search(text) or any(w in text for w in _ADAPT):
        return None
    return user_frame_of_line(frame.f_code.co_filename, line, frame.f_code.co_name)


def data_loop(f: types.FrameType | None) -> tuple[types.FrameType, tuple[int, str, tuple[str, ...]]] | None:
    """The innermost loop over data (not a `range` counter) around the current line, in the
    user's `FRAMES` innermost frames: its frame, first line, iterable's source and bound names."""
    depth = 0
    while f is not None and depth < FRAMES:
        if in_user_file(f):
            depth += 1
            for loop in _enclosing(f.f_code.co_filename, f.f_lineno, f.f_code.co_firstlineno):
                if not loop[1].startswith("range("):
                    return f, loop
        f = f.f_back
    return None


@functools.lru_cache(maxsize=1024)
def _enclosing(file: str, line: int, first: int) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    """The loops of a function (from its first line) around `line`, innermost first."""
    inside = [lp for lp in _loops(file) if lp[0] <= line <= lp[1] and lp[0] >= first]
    return tuple((start, iterable, names) for start, _, iterable, names in sorted(inside, reverse=True))


_LOOPS: dict[str, tuple[tuple[int, int, str, tuple[str, ...]], ...]] = {}


def _loops(file: str) -> tuple[tuple[int, int, str, tuple[str, ...]], ...]:
    """Every `for` of a file: (first line, last line, the iterable's source, the names it binds)."""
    got = _LOOPS.get(file)
    if got is None:
        tree = parsed(file)
        found = []
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, (ast.For, ast.AsyncFor)):
                names = tuple(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
                found.append((node.lineno, node.end_lineno or node.lineno, ast.unparse(node.iter), names))
        got = _LOOPS[file] = tuple(found)
    return got


def _holds(value: Any, target: torch.Tensor) -> bool:
    """`target` is `value`, or a field of it (an attribute, a dict value, a sequence item), or a
    view of one of those."""
    if value is None:
        return False
    candidates: list[Any] = [value]
    if isinstance(value, dict):
        candidates += list(value.values())
    elif isinstance(value, (list, tuple)):
        candidates += list(value)
    elif not isinstance(value, (torch.Tensor, torch.nn.Module)) and hasattr(value, "__dict__"):
        try:
            candidates += list(vars(value).values())
        except TypeError:
            pass
    ptr = _storage(target)
    return any(c is target or (isinstance(c, torch.Tensor) and ptr and _storage(c) == ptr) for c in candidates)


def _storage(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return 0


def _held_mask(f: types.FrameType, call: Any) -> _Line | None:
    """A mask (or index list) named held-out over exactly the loss's rows, the loss taking them all."""
    target, inp = call.target, call.input
    if target.dim() < 1 or target.is_complex() or not isinstance(inp, torch.Tensor):
        return None
    if target.dim() > 1 and not target.is_floating_point():
        return None  # (class labels are one per row; a 2-D integer target is a sequence's tokens)
    rows = int(target.shape[0])
    if rows < MIN_ROWS or inp.dim() == 0 or int(inp.shape[0]) != rows:
        return None
    if str(call.option("reduction", "mean")) == "none":
        return None  # per-row losses: weighted (masked) afterwards
    scope = released_locals(f)
    masks: list[tuple[str, Any]] = [(k, v) for k, v in scope.items() if _MASK.search(k.lower())]
    for k, v in scope.items():
        if v is not None and not isinstance(v, (torch.Tensor, torch.nn.Module, int, float, str, type)):
            for a in _MASK_ATTRS:
                got = _field(v, a)
                if isinstance(got, torch.Tensor):
                    masks.append((f"{k}.{a}", got))
    ignore = call.kwargs.get("ignore_index", -100)
    names, union = [], None
    seen: set[int] = set()
    for name, m in masks:
        if id(m) in seen:
            continue
        seen.add(id(m))
        sel = _held_rows(m, target, rows)
        if sel is not None:
            names.append(name)
            union = sel if union is None else union | sel
    if union is None:
        return None
    held = _labelled(union, target, ignore)
    if not held:
        return None
    return _Line("mask", user_frame_of(f), user_frame_of(f), ", ".join(names), held_rows=held)


def _field(obj: Any, name: str) -> Any:
    """`obj.name` when it is stored data: an instance attribute, or a field a graph object keeps
    behind `__getattr__` (PyG's `data.test_mask`); never a property's code."""
    try:
        got = vars(obj).get(name)
    except TypeError:
        got = None
    if got is None and "__getattr__" in dir(type(obj)):
        try:
            got = getattr(obj, name, None)
        except Exception:
            got = None
    return got


def _held_rows(mask: Any, target: torch.Tensor, rows: int) -> torch.Tensor | None:
    """The rows `mask` holds out among the loss's `rows` rows (a boolean selection), when it holds
    out some of them and not all (one host read)."""
    if not isinstance(mask, torch.Tensor) or mask.dim() != 1 or mask.is_complex():
        return None
    with torch.no_grad():
        if mask.shape[0] == rows and (mask.dtype == torch.bool or bool(((mask == 0) | (mask == 1)).all())):
            sel = mask.to(target.device) != 0  # a mask over the rows (bool, or 0 / 1 numbers)
        elif not mask.is_floating_point() and 0 < mask.numel() < rows:
            idx = mask.to(target.device)  # an index list of held-out rows
            if int(idx.min()) < 0 or int(idx.max()) >= rows:
                return None
            sel = torch.zeros(rows, dtype=torch.bool, device=target.device)
            sel[idx] = True
        else:
            return None
        count = int(sel.sum())
        return None if count == 0 or count == rows else sel


def _labelled(sel: torch.Tensor, target: torch.Tensor, ignore: Any) -> int:
    """The held-out rows whose labels the loss takes: every selected row of a regression target
    (a node's measured values), the selected class labels that are not `ignore_index`."""
    with torch.no_grad():
        if int(sel.sum()) == sel.numel():
            return 0  # (the held-out masks together cover every row: no training rows left to judge)
        if target.is_floating_point():
            return int(sel.sum())
        labelled = target[sel]
        if isinstance(ignore, int):
            labelled = labelled[labelled != ignore]
        return int(labelled.numel())
