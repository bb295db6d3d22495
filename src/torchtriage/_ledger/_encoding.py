"""Every split encodes its labels the same way: a class index means one class in training and
in evaluation.

A dataset that builds its own class-to-index map from what it finds (torchvision's
`ImageFolder` indexes the sorted sub-folders of its own root; a vocabulary or `label2id` built
from one split's labels) gives a split that lacks a class, or holds another one, different
indices: every later class shifts, and the evaluation scores a right prediction as wrong. The
model learns the training split's encoding, so that is the one the other splits must keep.

When a loader's pass begins, the root dataset it reads (and the objects it holds, two levels
deep: `ClassificationDataset.base`) is searched once for encodings (`_maps.py`). At the end, each
evaluation loader's encodings are compared with those of each training loader that fed the same
model, attribute by attribute (the same path: `class_to_idx`, `base.class_to_idx`). Classes whose
index differs are the mismatch; the harm is counted on the evaluation samples themselves
(`_maps.labels`): each sample's class name from its file path (`samples` / `imgs` of
`(path, index)`), its label from the dataset, and a label that the training encoding gives to
another class is a wrong target. Severity: `error` when the samples the evaluation loader
delivered carry such labels, checked by their path's class name; `warning` when the labels are
only read through the evaluation map itself (no path tells the class); `info` when the maps
differ and no per-sample label could be read. An evaluation dataset whose labels were remapped
to the training encoding (the samples agree with the training map) stays quiet, whatever its
own map says.

Cost: at most one attribute walk and one pass over a per-sample list per root dataset, when a
pass begins; nothing per batch.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from .._frames import UserFrame, user_frame_of_line
from ._epochs import Loader
from ._follow import root_of
from ._make import finding
from ._make import label as _label
from ._maps import Labels, encodings, labels

if TYPE_CHECKING:
    from ._checker import DataLedger

SHOWN = 6  # classes named in a finding


@dataclasses.dataclass(eq=False)
class Seen:
    """A root dataset's encodings and per-sample labels, kept when its first pass began."""

    maps: dict[str, dict[str, int]]
    labels: Labels | None
    built: UserFrame | None  # the line that built the dataset the loader reads


class Encodings:
    """A listener of the loader stream (`.._loaderstream`): notes each root dataset's encodings."""

    def __init__(self, ledger: DataLedger) -> None:
        self.ledger = ledger
        self.by_token: dict[int, Seen] = {}

    def on_begin(self, it: Any, loader: Any) -> None:
        dataset = getattr(loader, "dataset", None)
        root, n, _ = root_of(dataset)
        if root is None or not n:
            return
        token = self.ledger.follower.token(root)
        if token in self.by_token:
            return
        maps = encodings(root)
        if not maps:
            self.by_token[token] = Seen({}, None, None)
            return
        made = self.ledger.follower.made.get(loader)
        self.by_token[token] = Seen(maps, labels(root, n, maps), built_line(made))


def judge(ledger: DataLedger, found: Encodings) -> list[Any]:
    """Per evaluation loader: the first training loader (same model) whose encoding differs."""
    out = []
    loaders = [e for e in ledger.loaders if found.by_token.get(e.root_token) and found.by_token[e.root_token].maps]
    trains = [e for e in loaders if e.trains]
    done: set[int] = set()
    for ev in loaders:
        if ev.trains or ev.root_token in done or not any(s["batches"] for s in ev.summaries):
            continue
        for tr in trains:
            if tr.root_token == ev.root_token or (tr.models and ev.models and not tr.models & ev.models):
                continue
            f = compare(tr, found.by_token[tr.root_token], ev, found.by_token[ev.root_token])
            if f is not None:
                out.append(f)
                done.add(ev.root_token)
                break
    return out


def compare(tr: Loader, train: Seen, ev: Loader, evaluation: Seen) -> Any:
    for path in sorted(set(train.maps) & set(evaluation.maps), key=_preference):
        a, b = train.maps[path], evaluation.maps[path]
        shifted = {k: (a[k], b[k]) for k in sorted(a) if k in b and a[k] != b[k]}
        if not shifted:
            continue
        if train.labels is not None and train.labels.by_path and train.labels.agreement(a) < 0.9:
            continue  # the training samples do not carry this map's indices: it is not the encoding
        return _finding(tr, train, ev, evaluation, path, a, b, shifted)
    return None


def _preference(path: str) -> tuple[int, int, str]:
    """Dicts before class lists, shallow before deep."""
    return (path.endswith("[list]"), path.count("."), path)


def _finding(tr: Loader, train: Seen, ev: Loader, evaluation: Seen, path: str, a: dict[str, int],
             b: dict[str, int], shifted: dict[str, tuple[int, int]]) -> Any:
    lab = evaluation.labels
    seen = ev.seen
    wrong = delivered = 0
    example = None
    if lab is not None:
        wrong_mask = lab.wrong(a, b)
        mask = np.ones(len(wrong_mask), dtype=bool)
        if seen is not None and len(seen) >= len(wrong_mask):
            mask = seen[: len(wrong_mask)]
        delivered = int(mask.sum())
        hit = np.flatnonzero(wrong_mask & mask)
        wrong = int(hit.size)
        if wrong:
            i = int(hit[0])
            example = {"index": i, "class": lab.name_of(i, b), "label": int(lab.values[i]),
                       "training_class_of_label": _name_of_index(a, int(lab.values[i]))}
    if lab is None or not delivered:
        severity = "info"
    elif not wrong:
        return None  # the evaluation samples carry the training encoding: remapped on purpose
    else:
        severity = "error" if lab.by_path else "warning"
    missing = sorted(set(a) - set(b))
    extra = sorted(set(b) - set(a))
    attr = path.removesuffix("[list]")
    shown = ", ".join(f"{k!r}: {i} in training, {j} in evaluation" for k, (i, j) in list(shifted.items())[:SHOWN])
    evidence: dict[str, Any] = {
        "attribute": attr, "compared": "list index" if path.endswith("[list]") else "dict",
        "shifted_classes": {k: {"training": i, "evaluation": j} for k, (i, j) in list(shifted.items())[:32]},
        "shifted_count": len(shifted), "training_classes": len(a), "evaluation_classes": len(b),
        "missing_from_evaluation": missing[:16], "unknown_to_training": extra[:16],
        "wrong_labels": wrong, "evaluation_samples": delivered,
        "checked_by": (lab.source if lab is not None else "none"),
        "training_loader": tr.name, "training_where": tr.where(),
        "evaluation_loader": ev.name, "evaluation_where": ev.where(),
    }
    if example is not None:
        evidence["example"] = example
    frame = evaluation.built or ev.made or ev.frame
    why = ("missing" if missing else "extra" if extra else "order")
    return finding(
        "label_encoding_mismatch", "encoding", severity, frame,
        {"eval": _label(ev), "train": _label(tr), "attr": attr, "count": len(shifted), "shown": shown,
         "wrong": wrong, "n": delivered, "missing": ", ".join(map(repr, missing[:SHOWN])) or "-",
         "extra": ", ".join(map(repr, extra[:SHOWN])) or "-",
         "checked": lab.source if lab is not None else "-"},
        evidence, cause=f"encoding_{why}")


def _name_of_index(m: dict[str, int], i: int) -> str | None:
    return next((k for k, v in m.items() if v == i), None)


def built_line(made: UserFrame | None) -> UserFrame | None:
    """The line that built the dataset a DataLoader reads: the DataLoader call's dataset argument
    (`DataLoader(model.val_ds, ...)` -> `val_ds`), its last assignment in the same file before the
    DataLoader's line (else anywhere in the file). None when the source cannot tell."""
    if made is None:
        return None
    found = _built(made.file, made.line)
    if found is None:
        return None
    line, function = found
    return user_frame_of_line(made.file, line, function)


@functools.lru_cache(maxsize=128)
def _built(file: str, line: int) -> tuple[int, str] | None:
    from .._source import parsed

    tree = parsed(file)
    if tree is None:
        return None
    call = next((n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or line)
                 and _callee(n.func) == "DataLoader"), None)
    if call is None:
        return None
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "dataset"), None)
    name = _last_name(arg)
    if name is None:
        return None
    best: tuple[int, str] | None = None
    fallback: tuple[int, str] | None = None
    for fn_name, node in _assignments(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = {n for t in targets for n in _target_names(t)}
        if name not in names:
            continue
        if node.lineno < line and (best is None or node.lineno > best[0]):
            best = (node.lineno, fn_name)
        elif fallback is None:
            fallback = (node.lineno, fn_name)
    return best or fallback


def _assignments(tree: ast.Module) -> list[tuple[str, ast.Assign | ast.AnnAssign]]:
    out: list[tuple[str, ast.Assign | ast.AnnAssign]] = []

    def visit(node: ast.AST, fn: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name)
            elif isinstance(child, (ast.Assign, ast.AnnAssign)):
                out.append((fn, child))
            else:
                visit(child, fn)

    visit(tree, "<module>")
    return out


def _target_names(t: ast.expr) -> list[str]:
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, ast.Attribute):
        return [t.attr]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in _target_names(e)]
    return []


def _last_name(e: ast.expr | None) -> str | None:
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute):
        return e.attr
    return None


def _callee(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
