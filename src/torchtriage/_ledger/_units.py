"""A reported mean whose sum and count are in different units (session 12).

A running loss is a mean when what is summed and what it is divided by count the same things:
batch means summed and divided by the number of batches, or per-batch sums (``loss.item() *
x.size(0)``, a ``reduction="sum"`` loss) divided by the number of samples. Summing batch means
and dividing by the samples (``running += loss; n += y.size(0); running / n``, ``/
len(loader.dataset)``) reports the mean divided by the batch size; summing per-batch sums and
dividing by the batches reports it times the batch size. A further factor that counts another
thing (``* len(validation_loader)``) scales the figure by that count. The number runs, looks
like a loss, and is wrong by a factor that changes with the batch size.

Measured when a pass over a loader ends (`Denominators.on_stop`), in the user's frame that
iterates it (and, when that frame is a generator feeding another loop, the frames it feeds):
the function's source gives the sums kept in the loop (``x += addend``), the counts it keeps
(``n += 1``: batches; ``n += y.size(0)``: samples) and each division of a sum by a count or by
``len()`` of a loader or dataset. The addend's unit is known from the run: its base is the
output of a loss call whose reduction the ledger saw (`mean` or `sum`), times a batch size when
the source multiplies it by one. Harm measured: the factor between the reported figure and the
mean of the summed values, from the pass's batch sizes and the live counts.
"""

from __future__ import annotations

import ast
import types
import weakref
from typing import Any

from .._finding import from_catalogue
from .._frames import is_user_file, user_frame_of
from .._source import running_loop
from ._batchmeans import _batch_size, _resolve

MAX_LOSSES = 64
OFF = 0.05
_STRIP = frozenset({"item", "cpu", "detach", "numpy", "tolist", "float", "double", "clone", "sum", "mean"})


class LossUnits:
    """The reduction of the loss calls' outputs (the last `MAX_LOSSES`)."""

    def __init__(self) -> None:
        self.outputs: dict[int, tuple[weakref.ref[Any], str]] = {}

    def on_loss(self, call: Any) -> None:
        out = call.output
        if out is None or getattr(out, "dim", lambda: 1)() != 0:
            return
        reduction = call.option("reduction", "mean")
        if reduction not in ("mean", "sum"):
            return
        try:
            self.outputs[id(out)] = (weakref.ref(out), reduction)
        except TypeError:
            return
        if len(self.outputs) > MAX_LOSSES:
            self.outputs.pop(next(iter(self.outputs)))

    def unit_of(self, value: Any) -> str | None:
        entry = self.outputs.get(id(value))
        if entry is None or entry[0]() is not value:
            return None
        return entry[1]


def _base(e: ast.expr) -> ast.expr:
    """`x.cpu().detach().item()`, `float(x)`: the `x` inside."""
    while True:
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _STRIP and not e.args:
            e = e.func.value
        elif isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "float" and len(e.args) == 1:
            e = e.args[0]
        elif isinstance(e, ast.Attribute) and e.attr == "data":
            e = e.value
        else:
            return e


def _addend_unit(e: ast.expr, f: types.FrameType, units: LossUnits, assigned: set[str],
                 sizes: set[str]) -> tuple[str, str] | None:
    """(unit, the loss name) of an addend: a loss output's reduction, times a batch size."""
    e = _base(e)
    scale = 0
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        for a, b in ((e.left, e.right), (e.right, e.left)):
            if _batch_size(b, assigned) or (isinstance(b, ast.Name) and b.id in sizes):
                e, scale = _base(a), 1
                break
        else:
            return None
    elif isinstance(e, ast.BinOp) and isinstance(e.op, ast.Div) and _batch_size(e.right, assigned):
        e, scale = _base(e.left), -1
    if not isinstance(e, ast.Name):
        return None
    try:
        value = _resolve(e, f)
    except Exception:
        return None
    unit = units.unit_of(value)
    if unit is None:
        return None
    if scale == 1:
        unit = "sum" if unit == "mean" else "?"
    elif scale == -1:
        unit = "mean" if unit == "sum" else "?"
    return (unit, e.id) if unit in ("mean", "sum") else None


def _loop_facts(loop: ast.AST) -> tuple[dict[str, list[ast.expr]], dict[str, str], set[str], set[str]]:
    """Sums (name -> addends), counts (name -> 'batches' / 'samples'), names the loop assigns,
    names holding a batch size."""
    assigned: set[str] = set()
    for node in ast.walk(loop):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.comprehension)):
            targets = [node.target]
        for t in targets:
            assigned.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    sizes = {t.id for node in ast.walk(loop) if isinstance(node, ast.Assign) and _batch_size(node.value, assigned)
             for t in node.targets if isinstance(t, ast.Name)}
    sums: dict[str, list[ast.expr]] = {}
    counts: dict[str, str] = {}
    for node in ast.walk(loop):
        if not (isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name)):
            continue
        v = node.value
        name = node.target.id
        if isinstance(v, ast.Constant) and v.value == 1:
            counts[name] = "batches"
        elif _batch_size(v, assigned) or (isinstance(v, ast.Name) and v.id in sizes) or _batch_size(
                v, assigned | {n.id for n in ast.walk(v) if isinstance(n, ast.Name)}):
            counts[name] = "samples"
        else:
            sums.setdefault(name, []).append(v)
    return sums, counts, assigned, sizes


def unit_findings(f: types.FrameType, units: LossUnits, batches: int, samples: int, loader: Any,
                  step: int | None) -> list[Any]:
    """Findings for the divisions of a sum by a count of the other unit in the function `f` runs,
    for the loop that iterates the pass now ending (or the generator feeding it)."""
    if batches < 1 or samples <= batches:
        return []
    running = running_loop(f)
    if running is None:
        return []
    _, scope, loop = running
    sums, counts, assigned, sizes = _loop_facts(loop)
    if not sums:
        return []
    out = []
    mean_batch = samples / batches
    mine = (loader, getattr(loader, "dataset", None))
    parents = {id(c): p for p in ast.walk(scope) for c in ast.iter_child_nodes(p)}
    for node in ast.walk(scope):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
            continue
        num = _base(node.left)
        if not (isinstance(num, ast.Name) and num.id in sums):
            continue
        denom_unit, denom_text = _denominator_unit(node.right, f, counts, mine)
        if denom_unit is None:
            continue
        found = next((u for a in sums[num.id] if (u := _addend_unit(a, f, units, assigned, sizes)) is not None), None)
        if found is None:
            continue
        unit, loss_name = found
        factor = 1.0
        if unit == "mean" and denom_unit == "samples":
            factor = 1.0 / mean_batch
        elif unit == "sum" and denom_unit == "batches":
            factor = mean_batch
        mult, mult_text = _multiplier(parents.get(id(node)), node, f, mine)
        factor *= mult
        if abs(factor - 1) < OFF:
            continue
        out.append(_finding(f, node, num.id, loss_name, unit, denom_text, denom_unit, mean_batch, mult, mult_text,
                            factor, batches, samples, step))
    return out


def _denominator_unit(e: ast.expr, f: types.FrameType, counts: dict[str, str],
                      mine: tuple[Any, Any]) -> tuple[str | None, str]:
    text = ast.unparse(e)
    if isinstance(e, ast.Name) and e.id in counts:
        return counts[e.id], text
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "len" and len(e.args) == 1:
        try:
            of = _resolve(e.args[0], f)
        except Exception:
            return None, text
        if of is mine[0] and of is not None:
            return "batches", text
        if of is mine[1] and of is not None:
            return "samples", text
    return None, text


def _multiplier(parent: Any, node: ast.AST, f: types.FrameType, mine: tuple[Any, Any]) -> tuple[float, str]:
    """A product of the quotient by `len()` of another loader or dataset: its value."""
    if not (isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mult)):
        return 1.0, ""
    other = parent.right if parent.left is node else parent.left
    if not (isinstance(other, ast.Call) and isinstance(other.func, ast.Name) and other.func.id == "len"
            and len(other.args) == 1):
        return 1.0, ""
    from torch.utils.data import DataLoader, Dataset

    try:
        of = _resolve(other.args[0], f)
    except Exception:
        return 1.0, ""
    if not isinstance(of, (DataLoader, Dataset)) or any(of is m for m in mine):
        return 1.0, ""
    return float(len(of)), ast.unparse(other)  # type: ignore[arg-type]


def _finding(f: types.FrameType, node: ast.AST, total: str, loss: str, unit: str, denom: str, denom_unit: str,
             mean_batch: float, mult: float, mult_text: str, factor: float, batches: int, samples: int,
             step: int | None) -> Any:
    frame = user_frame_of(f, getattr(node, "lineno", f.f_lineno))
    what = "batch means" if unit == "mean" else "per-batch sums"
    evidence = {"sum": total, "summed": f"{loss} ({what}: its loss has reduction='{unit}')",
                "denominator": denom, "denominator_counts": denom_unit, "mean_batch_size": round(mean_batch, 3),
                "pass_batches": batches, "pass_samples": samples, "factor": round(factor, 6)}
    if mult_text:
        evidence["also_multiplied_by"] = f"{mult_text} = {int(mult)}"
    extra = f" and multiplies it by {mult_text} = {int(mult)}" if mult_text else ""
    return from_catalogue("silent", "silent.reported_mean_units", "units.message",
                          fields={"total": total, "what": what, "denom": denom, "counts": denom_unit, "extra": extra,
                                  "factor": f"{factor:.3g}", "batch": f"{mean_batch:.4g}"},
                          cause_key="units.cause", next_key="units.next", frame=frame, evidence=evidence,
                          severity="warning", stage="data", step=step, source_line=True)


def frames_of(f: types.FrameType | None) -> list[types.FrameType]:
    """`f`, and when it is a generator's frame, the user frames it yields into (at most 2)."""
    out: list[types.FrameType] = []
    while f is not None and len(out) < 3:
        out.append(f)
        if not f.f_code.co_flags & 0x20:  # CO_GENERATOR
            break
        f = f.f_back
        while f is not None and not is_user_file(f.f_code.co_filename):
            f = f.f_back
    return out
