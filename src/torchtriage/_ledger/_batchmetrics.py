"""A classification metric scored per batch and added up over a pass (session 12).

Precision, recall, F1, ROC AUC, MCC are not means over samples: the metric of a pass is not
the average of its batches' metrics. A loop that scores every batch with scikit-learn and adds
the scores up (``self.f1 += f1_score(t, p)``, ``scores.append(...)`` then ``np.mean``) reports
a batch-composition-dependent number: a batch that holds no positive scores its positive class
0 (sklearn's `zero_division`), so a perfect classifier is reported at the share of batches that
hold a positive. Accuracy is a mean, but per batch it weighs a small last batch like a full one.

The model: scikit-learn's metric functions are wrapped while the session runs (patched in
`sklearn.metrics` when it is imported); each call from the user's code keeps its targets,
predictions and result (host arrays, at most `MAX_ROWS` rows per call site and pass). At a
loader pass's end (`Denominators.on_stop`), a call site called once per batch of the pass whose
result (or a component of it) is added into an accumulator in the caller's source (``+=``,
``.append`` followed by a mean) is measured: the mean of its batch results against the metric
computed once over the pass's samples (same arguments). A warning when they differ by 1 % of
the pass's value or more (an absolute 0.01 for a metric near 0), else `info`.
"""

from __future__ import annotations

import ast
import functools
import importlib.abc
import importlib.machinery
import itertools
import sys
import types
import warnings
import weakref
from typing import Any

from .._finding import from_catalogue
from .._frames import user_frame_of_line, user_stack_frame
from .._source import parsed
from ._metricroles import swapped_roles

MODULE = "sklearn.metrics"
FUNCTIONS = ("accuracy_score", "balanced_accuracy_score", "precision_score", "recall_score", "f1_score",
             "fbeta_score", "precision_recall_fscore_support", "roc_auc_score", "average_precision_score",
             "matthews_corrcoef", "jaccard_score", "cohen_kappa_score")
ROLE_CALLS = 20  # calls per site judged for arguments in the wrong order
MAX_ROWS = 200_000  # rows kept per call site and pass
REL = 0.01


class _Call:
    __slots__ = ("seq", "func", "name", "y_true", "y_pred", "kwargs", "result", "file", "line", "code")

    def __init__(self, seq: int, func: Any, name: str, y_true: Any, y_pred: Any, kwargs: dict[str, Any],
                 result: Any, f: types.FrameType) -> None:
        self.seq, self.func, self.name = seq, func, name
        self.y_true, self.y_pred, self.kwargs, self.result = y_true, y_pred, kwargs, result
        self.file, self.line, self.code = f.f_code.co_filename, f.f_lineno, f.f_code


class BatchMetrics:
    """scikit-learn metric calls of the session, judged per loader pass."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.live = True
        self.depth = 0
        self.calls: list[_Call] = []
        self.seq = itertools.count(1)
        self.last = 0
        self.done = False
        self.finder: _Finder | None = None
        self.found: dict[tuple[str, int], tuple[tuple[bool, float], Any]] = {}
        self.judged: dict[tuple[str, int], int] = {}  # call site -> calls judged for swapped arguments
        self.swapped: dict[tuple[str, int], tuple[float, Any]] = {}
        if MODULE in sys.modules:
            self.patch()
        else:
            self.finder = _Finder(self)
            sys.meta_path.insert(0, self.finder)

    def guarded(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:  # our bug must never reach the user's code
            self.live = False
            self.session.internal_error("data_ledger.batch_metrics", e)
            return None

    def patch(self) -> None:
        if self.done or MODULE not in sys.modules:
            return
        self.done = True
        module = sys.modules[MODULE]
        for name in FUNCTIONS:
            original = getattr(module, name, None)
            if callable(original):
                self.session.patch(module, name, self._wrap(original, name))

    def _wrap(self, original: Any, name: str) -> Any:
        watch = self

        @functools.wraps(original)
        def scored(*args: Any, **kwargs: Any) -> Any:
            if not watch.live or watch.depth:
                return original(*args, **kwargs)
            watch.depth += 1
            try:
                out = original(*args, **kwargs)
            finally:
                watch.depth -= 1
            watch.guarded(watch.note, original, name, args, kwargs, out)
            return out

        return scored

    def note(self, func: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        import numpy as np

        y_true = args[0] if args else kwargs.get("y_true")
        y_pred = args[1] if len(args) > 1 else kwargs.get("y_pred", kwargs.get("y_score"))
        if y_true is None or y_pred is None or len(args) > 2:
            return
        t, p = np.asarray(_host(y_true)), np.asarray(_host(y_pred))
        if t.ndim == 0 or t.shape[0] != p.shape[0] or t.shape[0] > MAX_ROWS:
            return
        f = user_stack_frame(2)
        if f is None:
            return
        rest = {k: v for k, v in kwargs.items() if k not in ("y_true", "y_pred", "y_score")}
        call = _Call(next(self.seq), func, name, t.copy(), p.copy(), rest, out, f)
        self.calls.append(call)
        self._roles(call)
        if len(self.calls) > 20_000:
            del self.calls[:10_000]

    def _roles(self, call: _Call) -> None:
        """The call's arguments in scikit-learn's order (`_metricroles`), judged on a site's first calls."""
        key = (call.file, call.line)
        seen = self.judged.get(key, 0)
        if seen >= ROLE_CALLS:
            return
        self.judged[key] = seen + 1
        self.depth += 1
        try:
            found = swapped_roles(call)
        finally:
            self.depth -= 1
        if found is None:
            return
        gap = abs(found.evidence["value_reported"] - found.evidence["value_in_order"])
        old = self.swapped.get(key)
        if old is None or gap > old[0]:
            self.swapped[key] = (gap, found)

    def mark(self) -> int:
        """The sequence number a pass that begins now starts after."""
        return self.calls[-1].seq if self.calls else 0

    def on_pass(self, since: int, sizes: list[int], step: int | None) -> None:
        """A loader pass of `len(sizes)` batches ended: its per-batch scores that are added up."""
        batches = len(sizes)
        mine = [c for c in self.calls if c.seq > since]
        if batches < 2 or not mine:
            return
        sites: dict[tuple[str, int, str], list[_Call]] = {}
        for c in mine:
            sites.setdefault((c.file, c.line, c.name), []).append(c)
        for calls in sites.values():
            if len(calls) != batches:
                continue
            self.depth += 1
            try:
                self._judge(calls, step)
            finally:
                self.depth -= 1

    def _judge(self, calls: list[_Call], step: int | None) -> None:
        import numpy as np

        first = calls[0]
        kept = _accumulated(first)
        if not kept:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            whole = first.func(np.concatenate([c.y_true for c in calls]), np.concatenate([c.y_pred for c in calls]),
                               **first.kwargs)
        best: tuple[float, Any] | None = None
        for index, target, at in kept:
            try:
                per = [np.asarray(_part(c.result, index), dtype=float) for c in calls]
                by_batch = np.mean(np.stack(per), axis=0)
                over = np.asarray(_part(whole, index), dtype=float)
            except Exception:
                continue
            if by_batch.shape != over.shape or not np.all(np.isfinite(by_batch)) or not np.all(np.isfinite(over)):
                continue
            gap = np.abs(by_batch - over)
            worst = int(np.argmax(gap)) if gap.ndim else 0
            g = float(gap.reshape(-1)[worst])
            if best is None or g > best[0]:
                best = (g, (index, target, at, by_batch, over, worst))
        if best is None or best[0] <= 1e-12:
            return
        index, target, at, by_batch, over, worst = best[1]
        b, o = float(by_batch.reshape(-1)[worst]), float(over.reshape(-1)[worst])
        harmful = abs(b - o) >= max(REL * abs(o), 0.01 if abs(o) < 1 else 0.0)
        sizes = [int(c.y_true.shape[0]) for c in calls]
        name = first.name + (f"[{index}]" if index is not None else "")
        per_class = by_batch.ndim > 0 and by_batch.size > 1
        shown = f"{name} (class {worst})" if per_class else name
        evidence = {"metric": name, "accumulated_in": target, "accumulated_at_line": at,
                    "scored_at_line": first.line, "batches": len(calls), "samples": sum(sizes),
                    "smallest_batch": min(sizes), "largest_batch": max(sizes),
                    "mean_of_batches": np.round(by_batch, 6).tolist(), "over_the_pass": np.round(over, 6).tolist()}
        if per_class:
            evidence["class"] = worst
        empty = None if first.name == "accuracy_score" else _batches_without(calls, worst if per_class else None)
        if empty is not None:
            evidence["batches_without_that_class"] = empty
        f = _frame_of(first, at)
        found = from_catalogue("silent", "silent.metric_averaged_over_batches", "batchmetrics.message",
                               fields={"metric": shown, "target": target, "line": at, "batches": len(calls),
                                       "samples": sum(sizes), "by_batch": f"{b:.4g}", "over": f"{o:.4g}"},
                               cause_key="batchmetrics.cause", next_key="batchmetrics.next", frame=f,
                               evidence=evidence, severity="warning" if harmful else "info", stage="data",
                               step=step, source_line=True)
        key = (first.file, first.line)
        old = self.found.get(key)
        rank = (harmful, abs(b - o))
        if old is None or rank > old[0]:
            self.found[key] = (rank, found)  # the pass whose scores are furthest from the pass's metric

    def end(self) -> list[Any]:
        self.live = False
        if self.finder is not None and self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        self.finder = None
        self.calls.clear()
        return [f for _, f in self.found.values()] + [f for _, f in self.swapped.values()]


def _host(x: Any) -> Any:
    detach = getattr(x, "detach", None)
    if callable(detach):
        return x.detach().cpu().numpy()
    return x


def _part(result: Any, index: int | None) -> Any:
    return result if index is None else result[index]


def _batches_without(calls: list[_Call], cls: int | None) -> int | None:
    """Batches whose targets hold no sample of the class `cls` (or of the positive class 1)."""
    import numpy as np

    label = 1 if cls is None else cls
    try:
        return sum(1 for c in calls if c.y_true.ndim == 1 and not np.any(c.y_true == label))
    except Exception:
        return None


def _frame_of(call: _Call, line: int) -> Any:
    return user_frame_of_line(call.file, line, call.code.co_name)


def _accumulated(call: _Call) -> list[tuple[int | None, str, int]]:
    """(component of the result, accumulator, line) for each place in the calling function that
    adds the call's result into an accumulator: ``acc += f(...)``, ``r = f(...); acc += r[i]``,
    ``scores.append(f(...))`` with the list averaged later in that function."""
    tree = parsed(call.file)
    if tree is None:
        return []
    func = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.lineno <= call.line <= (n.end_lineno or n.lineno) and n.name == call.code.co_name), None)
    scope: ast.AST = func if func is not None else tree
    sites = [n for n in ast.walk(scope) if isinstance(n, ast.Call) and getattr(n, "lineno", 0) <= call.line
             <= (getattr(n, "end_lineno", None) or n.lineno) and _called_name(n) == call.name]
    if not sites:
        return []
    site = sites[0]
    names: set[str] = set()  # names the result is assigned to
    out: list[tuple[int | None, str, int]] = []
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign) and n.value is site:
            names.update(t.id for t in n.targets if isinstance(t, ast.Name))
    for n in ast.walk(scope):
        value: ast.expr | None = None
        target = ""
        if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add):
            value, target = n.value, ast.unparse(n.target)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "append" \
                and len(n.args) == 1 and _averaged_later(scope, ast.unparse(n.func.value)):
            value, target = n.args[0], ast.unparse(n.func.value)
        if value is None:
            continue
        index = _use(value, site, names)
        if index is not False:
            out.append((None if index is None else int(index), target, getattr(n, "lineno", call.line)))
    return out


def _use(value: ast.expr, site: ast.Call, names: set[str]) -> int | None | bool:
    """None: `value` is the whole result; i: its component i; False: neither."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "float" \
            and len(value.args) == 1:
        value = value.args[0]
    if value is site or (isinstance(value, ast.Name) and value.id in names):
        return None
    if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) \
            and isinstance(value.slice.value, int) and not isinstance(value.slice.value, bool):
        inner = value.value
        if inner is site or (isinstance(inner, ast.Name) and inner.id in names):
            return int(value.slice.value)
    return False


def _called_name(n: ast.Call) -> str:
    f = n.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _averaged_later(scope: ast.AST, key: str) -> bool:
    from ._batchmeans import _averages

    return any(_averages(n, key) for n in ast.walk(scope))


class _Finder(importlib.abc.MetaPathFinder):
    """Patches `sklearn.metrics` right after it is first imported."""

    def __init__(self, watch: BatchMetrics) -> None:
        self.watch = weakref.ref(watch)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        w = self.watch()
        if w is None or fullname != MODULE or w.done:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            q = self.watch()
            if q is not None:
                q.guarded(q.patch)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
