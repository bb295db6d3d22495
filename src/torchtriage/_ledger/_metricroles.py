"""A scikit-learn metric given the predictions as `y_true` (session 17).

scikit-learn's metrics take ``(y_true, y_pred)``. Several are not symmetric in them: precision
and recall trade places, a weighted average weighs each class by its support in ``y_true``, and
``labels=`` / ``pos_label`` pick classes of the truth. ``f1_score(preds, labels,
average='weighted')`` weighs the classes by how often the model predicts them, and reports a
number that is neither the weighted F1 nor anything else.

Evidence, both parts measured: the caller's source (`ast`) fills the first argument from a
model's decision (``argmax``, ``.max(dim)[1]``, ``topk``, ``predict``), directly or through the
names it is built from (``preds.extend(out.argmax(1).tolist())``), while the second argument is
filled from nothing of the kind; and, re-computed off the hot path with the two arguments in
scikit-learn's order, the metric differs from the value the user's call returned. A warning at a
gap of 0.01 or more, `info` below; quiet when the metric is symmetric on this run's values.
"""

from __future__ import annotations

import ast
import warnings
from typing import Any

from .._finding import from_catalogue
from .._frames import user_frame_of_line
from .._source import parsed

GAP = 0.01
_DECIDES = frozenset({"argmax", "argmin", "topk", "predict", "predict_classes"})
_DEPTH = 4


def swapped_roles(call: Any) -> Any:
    """The finding for one recorded call (`_batchmetrics._Call`), or None."""
    import numpy as np

    site = _site(call)
    if site is None:
        return None
    scope, node = site
    first, second = _argument(node, 0, "y_true"), _argument(node, 1, "y_pred")
    if first is None or second is None:
        return None
    if not _decided(scope, first, _DEPTH, set()) or _decided(scope, second, _DEPTH, set()):
        return None
    try:
        reported = float(call.result)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            right = float(call.func(call.y_pred, call.y_true, **call.kwargs))
    except Exception:
        return None
    if not (np.isfinite(reported) and np.isfinite(right)) or abs(reported - right) <= 1e-9:
        return None
    harmful = abs(reported - right) >= GAP
    line = getattr(first, "lineno", call.line)
    first_text, second_text = ast.unparse(first), ast.unparse(second)
    evidence = {"metric": call.name, "y_true_given": first_text, "y_pred_given": second_text,
                "call_line": call.line, "rows": int(call.y_true.shape[0]),
                "value_reported": round(reported, 6), "value_in_order": round(right, 6),
                "keyword_arguments": {k: repr(v)[:60] for k, v in call.kwargs.items()}}
    frame = user_frame_of_line(call.file, line, call.code.co_name)
    return from_catalogue("silent", "silent.metric_arguments_swapped", "metricroles.message",
                          fields={"metric": call.name, "first": first_text, "second": second_text,
                                  "reported": f"{reported:.4g}", "right": f"{right:.4g}", "rows": evidence["rows"]},
                          cause_key="metricroles.cause", next_key="metricroles.next", frame=frame,
                          evidence=evidence, severity="warning" if harmful else "info", stage="data",
                          op=call.name, source_line=True)


def _site(call: Any) -> tuple[ast.AST, ast.Call] | None:
    tree = parsed(call.file)
    if tree is None:
        return None
    func = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.lineno <= call.line <= (n.end_lineno or n.lineno) and n.name == call.code.co_name), None)
    scope: ast.AST = func if func is not None else tree
    sites = [n for n in ast.walk(scope) if isinstance(n, ast.Call) and n.lineno <= call.line
             <= (n.end_lineno or n.lineno) and _name(n.func) == call.name]
    return (scope, sites[0]) if len(sites) == 1 else None


def _argument(node: ast.Call, index: int, keyword: str) -> ast.expr | None:
    if len(node.args) > index and not any(isinstance(a, ast.Starred) for a in node.args[:index + 1]):
        return node.args[index]
    return next((k.value for k in node.keywords if k.arg == keyword), None)


def _name(e: ast.expr) -> str:
    return e.attr if isinstance(e, ast.Attribute) else e.id if isinstance(e, ast.Name) else ""


def _decides(e: ast.AST) -> bool:
    """The expression itself takes a model's decision: `argmax(...)`, `x.max(1)[1]`, `.indices`."""
    for n in ast.walk(e):
        if isinstance(n, ast.Call) and _name(n.func) in _DECIDES:
            return True
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Call) and _name(n.value.func) == "max" \
                and isinstance(n.slice, ast.Constant) and n.slice.value == 1:
            return True
        if isinstance(n, ast.Attribute) and n.attr == "indices" and isinstance(n.value, ast.Call) \
                and _name(n.value.func) in ("max", "topk"):
            return True
    return False


def _decided(scope: ast.AST, e: ast.expr, depth: int, seen: set[str]) -> bool:
    """`e` holds a model's decision, through the names it is built from in `scope`."""
    if _decides(e):
        return True
    if depth <= 0:
        return False
    for name in {n.id for n in ast.walk(e) if isinstance(n, ast.Name)} - seen:
        seen.add(name)
        if any(_decided(scope, v, depth - 1, seen) for v in _fills(scope, name)):
            return True
    return False


def _fills(scope: ast.AST, name: str) -> list[ast.expr]:
    """The values assigned to, added to, or appended / extended into `name` in the scope."""
    out: list[ast.expr] = []
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
            out.append(n.value)
        elif isinstance(n, ast.Assign):  # `_, p = out.max(1)`: the value's component at p's place
            for t in n.targets:
                if isinstance(t, (ast.Tuple, ast.List)):
                    out.extend(ast.Subscript(value=n.value, slice=ast.Constant(i), ctx=ast.Load())
                               for i, e in enumerate(t.elts) if isinstance(e, ast.Name) and e.id == name)
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and isinstance(n.target, ast.Name) \
                and n.target.id == name and n.value is not None:
            out.append(n.value)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("append", "extend") \
                and isinstance(n.func.value, ast.Name) and n.func.value.id == name and len(n.args) == 1:
            out.append(n.args[0])
    return out
