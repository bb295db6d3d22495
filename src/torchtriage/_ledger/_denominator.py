"""An average's denominator is the count of what was summed (session 9).

A loop over a DataLoader that sums a value per batch and divides the sum by a count computes a
mean only when the count is the number of things summed: the batches of the pass, or its
samples. Two faults break this silently: a fixed denominator that is not the pass's length (a
"short validation" divided by its configured maximum of 20 batches when the loader has 5: every
validation loss 4 times too small), and, under DDP, a rank's shard divided by the size of the
whole dataset (`total / len(loader.dataset)`: every metric `1 / world_size` of the truth).

Measured when a pass over a loader ends (its sampler exhausted), in the user's frame that
iterates it: the function's source (`ast`) gives the divisions of an accumulated sum, either
inside the loop (``acc = acc + value / denom``, ``epoch_loss += loss.item() / len(loader)``) or
after it (``total / len(loader.dataset)``, ``total /= n``, where ``total`` is summed in the
loop). The denominator is evaluated in the live frame when it is a name, an attribute of one,
or ``len()`` of one; a count the loop keeps itself (a name assigned in the loop: tokens counted
per batch) is the user's own count and is trusted. It is compared with the pass's batches and
samples (`ledger` counts). Harm measured: the reported mean is `count / denominator` times the
true one. Only denominators of at least the pass's batches are judged (a small constant, a world
size or accumulation steps, divides for another reason); a warning when the factor is off by
`OFF` or more, `info` for smaller factors (a `drop_last` remainder). One finding per line. A
DistributedSampler's shard divided by the whole set (the factor is `1 / world_size`) is the
distributed fault `distributed.shard_mean_denominator`.
"""

from __future__ import annotations

import ast
import types
from typing import TYPE_CHECKING, Any

from .._finding import from_catalogue
from .._frames import user_frame_of, user_stack_frame
from .._loaderstream import as_rows
from .._loaderstream import tensors as batch_tensors
from .._source import running_loop
from ._batchmeans import _following, _resolve, batch_ratio_means, finding_of
from ._batchmetrics import BatchMetrics
from ._lastlogged import last_logged_findings
from ._units import frames_of, unit_findings
from ._unreset import Unreset
from ._unsummed import unsummed_findings

if TYPE_CHECKING:
    from ._checker import DataLedger

OFF = 0.05
MAX_SIZES = 100_000  # batch sizes kept per pass (a longer pass is not judged for its batch means)


class Denominators:
    """Listener of the loader stream: per pass its batches and samples; at its end, the divisions."""

    def __init__(self, ledger: DataLedger) -> None:
        self.ledger = ledger
        self.counts: dict[int, list[int]] = {}  # id(iterator) -> [batches, samples, world]
        self.sizes: dict[int, list[int]] = {}  # id(iterator) -> the pass's batch sizes (the first MAX_SIZES)
        self.loaders: dict[int, Any] = {}  # id(iterator) -> the loader it iterates
        self.begun: dict[int, int] = {}  # id(iterator) -> the session's step when its pass began
        self.found: dict[tuple[str, int], Any] = {}
        self.marks: dict[int, int] = {}  # id(iterator) -> the last scikit-learn metric call before its pass
        self.metrics: BatchMetrics | None = None
        self.unreset = Unreset()  # per-batch collections averaged each pass and never emptied
        try:
            self.metrics = BatchMetrics(ledger.session)  # per-batch metric scores added up over a pass
        except Exception as e:
            if ledger.session is not None:
                ledger.session.internal_error("data_ledger.batch_metrics", e)

    def on_begin(self, it: Any, loader: Any) -> None:
        self.counts[id(it)] = [0, 0, _shards(loader)]
        if self.metrics is not None:
            self.marks[id(it)] = self.metrics.mark()
        self.sizes[id(it)] = []
        self.loaders[id(it)] = loader
        self.begun[id(it)] = getattr(getattr(self.ledger, "session", None), "step", 0) or 0

    def on_reset(self, it: Any, loader: Any) -> None:
        self.counts[id(it)] = [0, 0, _shards(loader)]
        if self.metrics is not None:
            self.marks[id(it)] = self.metrics.mark()
        self.sizes[id(it)] = []
        self.loaders[id(it)] = loader
        self.begun[id(it)] = getattr(getattr(self.ledger, "session", None), "step", 0) or 0

    def on_batch(self, it: Any, indices: Any, data: Any) -> None:
        c = self.counts.get(id(it))
        if c is None:
            return
        rows = as_rows(indices)
        if rows is not None:
            size = int(rows.size)
        else:
            size = next((int(t.shape[0]) for t in batch_tensors(data) if t.dim() >= 1), 1)
        c[0] += 1
        c[1] += size
        sizes = self.sizes.get(id(it))
        if sizes is not None and len(sizes) < MAX_SIZES:
            sizes.append(size)

    def on_stop(self, it: Any) -> None:
        c = self.counts.pop(id(it), None)
        sizes = self.sizes.pop(id(it), [])
        loader = self.loaders.pop(id(it), None)
        mark = self.marks.pop(id(it), None)
        begun = self.begun.pop(id(it), 0)
        if c is None or not c[0]:
            return
        if self.metrics is not None and mark is not None and len(sizes) == c[0]:
            self.metrics.guarded(self.metrics.on_pass, mark, sizes,
                                 getattr(getattr(self.ledger, "session", None), "step", None))
        f = user_stack_frame(1)
        if f is None:
            return
        mine = (loader, getattr(loader, "dataset", None))
        for div, text, value, of in divisions(f):
            if of is not None and _loaderish(of) and not any(of is m for m in mine):
                continue  # another loader's count: that pass's mean (one loop over a train and a val phase)
            self.judge(f, div, text, value, c[0], c[1], c[2])
        units = getattr(self.ledger, "loss_units", None)
        if units is not None:
            for g in frames_of(f):
                for found in unit_findings(g, units, c[0], c[1], loader,
                                           getattr(getattr(self.ledger, "session", None), "step", None)):
                    self.found.setdefault((found.file, found.line), found)
        self._unsummed(f, c, loader, begun)
        try:
            self.unreset.on_pass(f, c[0], getattr(getattr(self.ledger, "session", None), "step", None))
        except Exception as e:  # our bug must never reach the user's code
            session = getattr(self.ledger, "session", None)
            if session is not None:
                session.internal_error("data_ledger.unreset", e)
        if len(sizes) == c[0]:
            for line, _, fields in batch_ratio_means(f, sizes):
                found = finding_of(f, line, fields, getattr(getattr(self.ledger, "session", None), "step", None))
                key = (found.file, found.line)
                old = self.found.get(key)
                if old is None or (old.severity.value == "info" and found.severity.value != "info"):
                    self.found[key] = found  # (the first pass whose means differ most visibly)

    def _unsummed(self, f: types.FrameType, c: list[int], loader: Any, begun: int) -> None:
        session = getattr(self.ledger, "session", None)
        step = getattr(session, "step", None)
        health = getattr(session, "health", None)
        losses = [v for s, v in health.points("loss") if s >= begun and v == v] if health is not None else []
        if step is not None and step - begun < c[0] // 2:
            losses = []  # (an evaluation pass: the training losses are not its figures)
        for g in frames_of(f):
            for found in unsummed_findings(g, c[0], c[1], loader, losses, step):
                self.found.setdefault((found.file, found.line), found)
            if step is not None and step == begun:  # an evaluation pass: no optimizer step ran in it
                for found in last_logged_findings(g, c[0], step):
                    self.found.setdefault((found.file, found.line), found)

    def judge(self, f: types.FrameType, div: ast.AST, text: str, value: int, batches: int, samples: int,
              world: int = 1) -> None:
        frame = user_frame_of(f, getattr(div, "lineno", f.f_lineno))
        key = (frame.file, frame.line)
        if key in self.found or value < batches:
            return  # (a small constant, a world size or accumulation steps, divides for another reason)
        off = {what: n / value for what, n in (("batches", batches), ("samples", samples))}
        what, factor = min(off.items(), key=lambda kv: abs(kv[1] - 1))
        if abs(factor - 1) < 1e-9:
            return
        harmful = abs(factor - 1) >= OFF
        evidence = {"denominator": text, "denominator_value": value, "pass_batches": batches,
                    "pass_samples": samples, "closest_count": what, "factor": round(factor, 4)}
        fields = {"expr": text, "value": value, "batches": batches, "samples": samples, "what": what, "world": world,
                  "factor": f"{factor:.3g}"}
        # A rank's shard divided by the whole set: the DistributedSampler's split, not the data's.
        shard = world > 1 and what == "samples" and abs(factor * world - 1) < 0.1
        if shard:
            evidence["world_size"] = world
        category, code, cause = ("distributed", "distributed.shard_mean_denominator", "denominator.shard") \
            if shard else ("data", "data.mean_denominator", "denominator")
        self.found[key] = from_catalogue(category, code, "denominator.message", fields=fields,
                                         cause_key=f"{cause}.cause", next_key=f"{cause}.next", frame=frame,
                                         evidence=evidence, severity="warning" if harmful else "info",
                                         stage="data", source_line=True)

    def end(self) -> list[Any]:
        metrics = self.metrics.end() if self.metrics is not None else []
        return list(self.found.values()) + metrics + self.unreset.end()


def _shards(loader: Any) -> int:
    """The world size of a loader's DistributedSampler (1: none)."""
    from torch.utils.data.distributed import DistributedSampler

    sampler = getattr(loader, "sampler", None)
    return int(getattr(sampler, "num_replicas", 1) or 1) if isinstance(sampler, DistributedSampler) else 1


def _loaderish(obj: Any) -> bool:
    """A DataLoader or a Dataset: the count of a pass over it."""
    from torch.utils.data import DataLoader, Dataset

    return isinstance(obj, (DataLoader, Dataset))


def divisions(f: types.FrameType) -> list[tuple[ast.AST, str, int, Any]]:
    """The divisions of an accumulated sum by a count that are tied to the loop `f` runs now:
    (node, the denominator's source, its value now, the object whose `len()` it is or None). A
    loop whose iterable changes (``for batch in loaders[phase]``) runs one pass per phase: a sum
    divided by another phase's loader is judged at that loader's pass."""
    found = running_loop(f)
    if found is None:
        return []
    _, scope, loop = found
    summed, counted = _accumulated(loop)
    out: list[tuple[ast.AST, str, int, Any]] = []
    for node in ast.walk(loop):  # inside: a quotient added into a sum
        for q in _added_quotients(node):
            out += _valued(q.right, q, f, counted)
    end = loop.end_lineno or loop.lineno
    body = getattr(scope, "body", [])
    for stmt in _following(body, loop):
        for node in _unconditional(stmt):  # after: a sum of the loop divided (on every path)
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.left, ast.Name)
                    and node.left.id in summed and node.lineno > end):
                out += _valued(node.right, node, f, counted)
            elif (isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div)
                  and isinstance(node.target, ast.Name) and node.target.id in summed and node.lineno > end):
                out += _valued(node.value, node, f, counted)
    return out


_BRANCHES = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.Match, ast.FunctionDef, ast.AsyncFunctionDef,
             ast.ClassDef, ast.Lambda, ast.IfExp)


def _unconditional(stmt: ast.AST) -> list[ast.AST]:
    """The nodes of `stmt` that run whenever it runs: not inside a branch, a loop or a definition
    (a division in ``if mode == "bug":`` may never run; the source alone cannot say)."""
    out = [stmt]
    if isinstance(stmt, _BRANCHES):
        return []
    for child in ast.iter_child_nodes(stmt):
        out += _unconditional(child)
    return out


def _accumulated(loop: ast.AST) -> tuple[set[str], set[str]]:
    """Names summed in the loop (``x += ...``, ``x = x + ...``), and every name assigned in it."""
    summed: set[str] = set()
    assigned: set[str] = set()
    for node in ast.walk(loop):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            assigned.add(node.target.id)
            if isinstance(node.op, ast.Add):
                summed.add(node.target.id)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        assigned.add(n.id)
                        if isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Add) and any(
                                isinstance(m, ast.Name) and m.id == n.id for m in ast.walk(node.value)):
                            summed.add(n.id)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            for n in ast.walk(node.target):
                if isinstance(n, ast.Name):
                    assigned.add(n.id)
    return summed, assigned


def _added_quotients(node: ast.AST) -> list[ast.BinOp]:
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
        v = node.value
        return [v] if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Div) else []
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return [s for s in (node.left, node.right) if isinstance(s, ast.BinOp) and isinstance(s.op, ast.Div)]
    return []


def _valued(expr: ast.expr, node: ast.AST, f: types.FrameType,
            counted: set[str]) -> list[tuple[ast.AST, str, int, Any]]:
    root = expr.args[0] if _is_len(expr) else expr  # type: ignore[attr-defined]
    base = root
    while isinstance(base, ast.Attribute):
        base = base.value
    if not isinstance(base, ast.Name) or base.id in counted:
        return []  # not a name's count, or the loop's own count (trusted)
    of = None
    try:
        value = _resolve(root, f)
        if _is_len(expr):
            of, value = value, len(value)
    except Exception:
        return []
    if isinstance(value, bool) or not isinstance(value, int):
        return []
    return [(node, ast.unparse(expr), int(value), of)]


def _is_len(expr: ast.expr) -> bool:
    return (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "len"
            and len(expr.args) == 1 and not expr.keywords)


def judge(ledger: DataLedger) -> list[Any]:
    d = getattr(ledger, "denominators", None)
    return d.end() if d is not None else []
