"""An evaluation the user calls a test or a validation that reads the training loader (session 16).

`test_acc = accuracy(train_loader, net)`, or `test_iter = self.train_loader.__iter__()` inside an
`evaluate()`: nothing raises, and the "test" curve (and any best epoch chosen from it) is the
training-set score. The split verdicts (`_verdicts.splits`) leave a pass over exactly the training
rows alone (train accuracy, measured on purpose); what tells the slip apart is the name the user
gives what the pass produces.

Recorded when a pass over a loader begins: the user's frames on the stack (innermost first, at
most `DEPTH`), and of each the names its statement assigns (`test_acc = ...`, `val_iter = ...`);
the first frame whose assigned names carry a role decides (a validation or test word, none
naming training; on the pass's own line a training word names the loader, `train_loader =
iter(train_loader)`, and the callers are read on). Per pass until one names it; a cached parse
per line.

Judged at the end, per evaluation loader (no backward between its batches) whose rows are all
rows a training loader over the same dataset object trained on (measured: every sample evaluated
was trained on in this run; another `Subset` over them, a k-fold's next fold, is not judged): a
warning when the pass's result is named for a validation or a test while the program built a
held-out loader (a DataLoader named for a validation or test, or one over another dataset that
evaluates). The line is the statement that names the result.
"""

from __future__ import annotations

import ast
import functools
import re
from typing import TYPE_CHECKING, Any

from .._frames import UserFrame, in_user_file, user_frame_of
from .._source import parsed
from ._epochs import Loader

if TYPE_CHECKING:
    import types

DEPTH = 6  # user frames read per pass
MIN_ROWS = 8
MIN_BATCHES = 2
MAX_MADE = 64
_HELD = {"val": "validation", "valid": "validation", "validation": "validation", "dev": "validation",
         "test": "test", "testing": "test", "holdout": "test", "heldout": "test"}
_TRAIN = {"train", "training", "tr", "trn"}
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


def words(name: str) -> list[str]:
    """`test_loader_iter` -> test, loader, iter; `valAcc` -> val, acc."""
    return [w.lower() for w in _WORDS.findall(name)]


def held_role(names: tuple[str, ...]) -> str | None:
    """The held-out role the names give (None: none, several, or one also naming training)."""
    found: set[str] = set()
    for n in names:
        ws = words(n)
        if _TRAIN & set(ws):
            return None
        found |= {_HELD[w] for w in ws if w in _HELD}
    return found.pop() if len(found) == 1 else None


@functools.lru_cache(maxsize=512)
def assigned(file: str, line: int) -> tuple[str, ...]:
    """The names the statement on `line` assigns (`test_acc = f(...)`, `self.val_iter = ...`)."""
    tree = parsed(file)
    if tree is None:
        return ()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) \
                and node.lineno <= line <= (node.end_lineno or node.lineno):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out = []
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Name):
                        out.append(sub.id)
                    elif isinstance(sub, ast.Attribute):
                        out.append(sub.attr)
            return tuple(out)
    return ()


def named_frame(start: types.FrameType | None) -> tuple[UserFrame, str] | None:
    """The first user frame (innermost first) whose statement names a held-out result, and the role."""
    f, seen = start, 0
    while f is not None and seen < DEPTH:
        if in_user_file(f):
            seen += 1
            names = assigned(f.f_code.co_filename, f.f_lineno)
            if names:
                r = held_role(names)
                if r is not None:
                    return user_frame_of(f), r
                if seen > 1 and any(_TRAIN & set(words(n)) for n in names):
                    return None  # a result named for training (the pass's own line names the loader)
        f = f.f_back
    return None


class EvalNames:
    """Per loader entry: the named passes over it, and the loaders the program made."""

    def __init__(self) -> None:
        self.named: dict[int, tuple[UserFrame, str]] = {}  # id(Loader) -> the naming statement, the role
        self.made: list[tuple[str, UserFrame, int]] = []  # (name, where, root dataset's token) of DataLoaders made

    def on_pass(self, entry: Loader, start: types.FrameType | None) -> None:
        if id(entry) in self.named:
            return
        found = named_frame(start)  # (a walk of a few frames per pass; each line's parse is cached)
        if found is not None:
            self.named[id(entry)] = found

    def on_made(self, name: str | None, frame: UserFrame, token: int) -> None:
        if len(self.made) < MAX_MADE:
            self.made.append((name or "", frame, token))


def judge(names: EvalNames, loaders: list[Loader]) -> list[Any]:
    from ._make import finding
    from ._make import label as _label
    from ._roles import role

    out: list[Any] = []
    for e in loaders:
        hit = names.named.get(id(e))
        if hit is None or not _evaluates(e) or e.seen is None or not e.root_token or role(e) is not None:
            continue
        rows = int(e.seen.sum())
        if rows < MIN_ROWS:
            continue
        for t in loaders:
            if t is e or not t.trains or t.root_token != e.root_token or t.n != e.n or t.trained_on is None:
                continue
            if t.chain != e.chain:
                continue  # another dataset object over those rows (a fold's Subset: k-fold reuses one model)
            if e.models and t.models and not e.models & t.models:
                continue
            if int((e.seen & t.trained_on).sum()) != rows:
                continue
            held = _held_out(names, loaders, e)
            if held is None:
                continue
            frame, named = hit
            fields = {"role": named, "eval": _label(e), "train": _label(t), "train_where": t.where(),
                      "rows": rows, "statement": frame.source.strip(), "held": held}
            evidence = {"evaluation_loader": e.name, "evaluation_at": e.where(), "training_loader": t.name,
                        "training_at": t.where(), "named_as": named, "named_at": f"{frame.file}:{frame.line}",
                        "samples_evaluated": rows, "of_them_trained_on": rows, "held_out_loader": held}
            out.append(finding("split_overlap", "eval_on_train", "warning", frame, fields, evidence))
            break
    return out


def _evaluates(e: Loader) -> bool:
    """No backward ran between any two of its batches (the window after a pass's last batch is left
    out: it stays open over the training that follows a pass left unfinished, an evaluation that
    takes its first k batches), over passes of at least `MIN_BATCHES` batches."""
    epochs = [ep for ep in e.epochs if ep.closed]
    if not epochs or not any(ep.batches >= MIN_BATCHES for ep in epochs):
        return False
    return all(not any(ep.backwards[:ep.batches - 1]) for ep in epochs)


def _held_out(names: EvalNames, loaders: list[Loader], e: Loader) -> str | None:
    """A held-out loader the program made: named for a validation or test, or over a dataset no
    training loader reads."""
    trained = {o.root_token for o in loaders if o.trains}
    for name, frame, token in names.made:
        if e.made is not None and frame == e.made:
            continue
        if held_role((name,)) is not None or (token and token not in trained):
            return f"{name or 'a DataLoader'} ({frame.file}:{frame.line})"
    for o in loaders:
        if o is not e and _evaluates(o) and o.root_token and o.root_token != e.root_token and o.summaries:
            return f"{o.name} ({o.where()})"
    return None

