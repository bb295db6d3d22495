"""A split's rows go to exactly one role (session 12): the loader meant for the held-out rows
delivers the training rows, and the held-out rows are never loaded.

The usual slip: two index samplers are built over one dataset (``train_sampler``,
``valid_sampler``), and the second loader is given the first one's
(``DataLoader(data, sampler=train_sampler)`` for the validation, or for a second optimizer's
step: a NAS supernet's architecture parameters, a meta-learner's outer loop). Nothing raises; the
"held-out" numbers are measured on rows the weights were trained on, and a second optimizer fits
its parameters to rows the first one has memorised.

Judged at the end, per pair of loaders over one root dataset: loader `b` delivered exactly the
rows training loader `a` trained on, while rows of that dataset no loader ever delivered remain
(at least `MIN_UNLOADED` rows and `SHARE` of it). `b` is the held-out one when the user's names
say so (`val_loader`, `test_dl`: `_verdicts.role`), or when an index sampler that no DataLoader
was given (a `Sampler` with `indices`, found among the locals of the frame that made `b`) holds
the rows never loaded: the held-out split was built and never used. A training loader over the
rows trained on twice (pretraining, then fine-tuning on the same rows with another optimizer)
with nothing left unloaded, or no sign of a held-out role, is not reported.

Cost: where a DataLoader is made, the ids of its samplers, and once per making line its frame's
index samplers (at most `MAX_SAMPLERS`, their indices copied when at most `MAX_INDICES`).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from .._frames import UserFrame, released_locals, user_stack_frame
from ._epochs import Loader

if TYPE_CHECKING:
    from ._checker import DataLedger

MIN_UNLOADED = 2
SHARE = 0.01
MAX_SAMPLERS = 16
MAX_INDICES = 1 << 22
COVERED = 0.9  # an unused sampler holds the unloaded rows when this share of its rows is unloaded


@dataclasses.dataclass(eq=False)
class IndexSampler:
    name: str
    frame: UserFrame | None
    indices: np.ndarray
    ref: Any  # a weak reference to the sampler (None: not weakly referenceable)
    ident: int = 0  # its id while alive
    gone_unused: bool = False  # it was freed before any loader was made with it (a loader would hold it)


class Samplers:
    """Where loaders are made: the samplers they use, and the index samplers beside them."""

    def __init__(self) -> None:
        self.used: set[int] = set()
        self.found: list[IndexSampler] = []
        self.frames: set[tuple[str, int]] = set()

    def on_made(self, loader: Any) -> None:
        for obj in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
            if obj is not None:
                self.used.add(id(obj))
        f = user_stack_frame(1)
        if f is None:
            return
        key = (f.f_code.co_filename, f.f_lineno)
        if key in self.frames:
            return
        self.frames.add(key)
        from torch.utils.data import Sampler

        from ._unloaded import _assigned

        known = {id(s.ref()) for s in self.found if s.ref is not None and s.ref() is not None}
        for name, value in released_locals(f).items():
            if not isinstance(value, Sampler) or id(value) in known or len(self.found) >= MAX_SAMPLERS:
                continue
            indices = _indices(value)
            if indices is None:
                continue
            entry = IndexSampler(name, _assigned(f, name), indices, None, id(value))
            try:
                entry.ref = weakref.ref(value, self._freed(entry))
            except TypeError:
                entry.ref = None
            self.found.append(entry)
            known.add(id(value))

    def _freed(self, entry: IndexSampler) -> Any:
        def freed(_: Any) -> None:
            # A loader given the sampler holds it: freed while unused, no loader ever had it.
            entry.gone_unused = entry.ident not in self.used

        return freed

    def unused(self) -> list[IndexSampler]:
        out = []
        for s in self.found:
            obj = s.ref() if s.ref is not None else None
            if obj is not None and id(obj) in self.used:
                continue
            if obj is None and s.ref is not None and not s.gone_unused:
                continue  # freed after a loader used it
            out.append(s)
        return out


def _indices(sampler: Any) -> np.ndarray | None:
    idx = getattr(sampler, "indices", None)
    if idx is None:
        return None
    try:
        n = len(idx)
    except TypeError:
        return None
    if not n or n > MAX_INDICES:
        return None
    try:
        arr = np.asarray(idx.tolist() if hasattr(idx, "tolist") else list(idx)).reshape(-1)
    except (TypeError, ValueError):
        return None
    if arr.dtype.kind not in "iu":
        return None
    return arr.astype(np.int64)


_ROLES = (("validation", ("val", "dev")), ("test", ("test", "holdout")))


def role(entry: Loader) -> str | None:
    """The role the user's variable name gives an evaluation loader (`val_loader`, `test_dl`)."""
    name = entry.name.lower()
    found = [r for r, words in _ROLES if any(w in name for w in words)]
    return found[0] if len(found) == 1 else None


def judge(ledger: DataLedger, samplers: Samplers | None) -> list[Any]:
    loaders = [e for e in ledger.loaders if e.seen is not None and e.n and e.root_token]
    out: list[Any] = []
    for b in loaders:
        if "train" in b.name.lower():
            continue
        for a in loaders:
            if a is b or not a.trains or a.root_token != b.root_token or a.n != b.n or a.trained_on is None:
                continue
            if a.models and b.models and not a.models & b.models:
                continue  # another model (k-fold: each fold's model on its own fold)
            rows = b.seen
            if rows is None or not rows.any() or not np.array_equal(rows, a.trained_on):
                continue
            loaded = np.zeros(b.n, dtype=bool)
            for e in loaders:
                if e.root_token == b.root_token and e.n == b.n and e.seen is not None:
                    loaded |= e.seen
            never = np.flatnonzero(~loaded)
            if never.size < MIN_UNLOADED or never.size < SHARE * b.n:
                continue
            built = [s for s in (samplers.unused() if samplers is not None else []) if _holds(s.indices, never, b.n)]
            named = role(b)
            if named is None and not built:
                continue
            if named is None and b.trains and (role(a) is not None or not _made_after(b, a)):
                continue  # two training loaders on one sampler: the later-made one was meant for the other
            out.append(_finding(a, b, int(rows.sum()), never, built[0] if built else None, named))
            break
        if out:
            break
    return out


def _made_after(b: Loader, a: Loader) -> bool:
    return b.made is not None and a.made is not None and b.made.file == a.made.file and b.made.line > a.made.line


def _holds(indices: np.ndarray, never: np.ndarray, n: int) -> bool:
    inside = indices[(indices >= 0) & (indices < n)]
    if inside.size < MIN_UNLOADED or inside.size < 0.5 * indices.size:
        return False
    return float(np.isin(inside, never).mean()) >= COVERED


def _finding(a: Loader, b: Loader, rows: int, never: np.ndarray, built: IndexSampler | None,
             named: str | None) -> Any:
    from .._frames import user_frame_of_line
    from ._lines import keyword_line
    from ._make import finding
    from ._make import label as _label

    frame = b.made or b.frame
    if frame is not None:
        line = keyword_line(frame.file, frame.line, "sampler")
        if line is not None and line != frame.line:
            frame = user_frame_of_line(frame.file, line, frame.function)
    trains = b.trains
    evidence = {
        "loader": b.name, "loader_at": b.where(), "training_loader": a.name, "training_at": a.where(),
        "rows_delivered": rows, "same_rows_as_training": True, "loader_trains": trains,
        "dataset_rows": b.n, "never_loaded": int(never.size), "never_loaded_examples": never[:5].tolist(),
        "held_out_by": ("unused sampler" if built is not None else "name"),
    }
    if built is not None:
        evidence["unused_sampler"] = built.name
        evidence["unused_sampler_at"] = f"{built.frame.file}:{built.frame.line}" if built.frame else "?"
        evidence["unused_sampler_rows"] = int(built.indices.size)
    fields = {"loader": _label(b), "where": b.where(), "train": _label(a), "rows": rows, "n": b.n,
              "never": int(never.size), "examples": ", ".join(map(str, never[:3].tolist())),
              "sampler": built.name if built is not None else "?", "role": named or "?"}
    return finding("heldout_unloaded", "role_train" if trains else "role_eval", "error", frame, fields, evidence,
                   cause="role_sampler" if built is not None else "role_name")
