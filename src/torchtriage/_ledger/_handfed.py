"""Samples that reach a model without a DataLoader (issue 25): a Python generator yielding
tensors, rows indexed out of a tensor by hand, a whole validation tensor given at once.

No sampler gives their indices, so they are known by content: at a root forward that no
DataLoader batch fed (no batch was yielded since the previous forward, and its input is not a
batch's tensor fed before), the rows of its first input of two or more dimensions are digested
where they are (`dense_keys`: about 20 elementwise integer kernels on at most 513 values per row,
on the batch's device, no host read), and kept per side: rows of training forwards (gradients
on, train() mode) and rows of evaluation forwards, per model: a forward in eval() mode without
gradients, or one without gradients whose calling lines name held-out data (`val`, `test`,
`dev`, `eval`, `holdout`; a no_grad forward in train() mode otherwise is an agent acting or a
target computed, not an evaluation). The same tensor object given again (a benchmark's fixed
batch, a validation tensor evaluated each epoch) is not digested again. At most `MAX_KEYS` rows
per side (8 MiB); the digests are read once, at the end.

The split verdict (`judge`): distinct evaluation rows that are also training rows (of these
forwards or of a DataLoader that trained) are reported as `data.split_overlap` when the
evaluation data is an evaluation set (the same batch, by content, evaluated at least twice: a
validation pass repeated; a stream of new rows never is), the overlap
is at least 8 rows and at least `SPLIT_SHARE` of the evaluation rows and three times the rate at
which rows repeat inside one forward (natural duplicates, draws with replacement); an error.
A forward whose calling lines name training data (``train_acc = evaluate(model, X_train)``)
measures the training set on purpose and is left out, and so is a forward without gradients of
one model on the very view a training forward of another model takes next to it (a teacher's
soft targets, an EMA or momentum encoder's: `_targets.py`).

A forward with gradients in `train()` mode inside a loop over data named held-out
(`_heldlabels.held_loop_frame`: ``for x, y in zip(test_data, test_label):``) is an evaluation
too, and the loop names its rows an evaluation set (no second pass needed; single rows count).
Unbatched samples (a 1-D float input) are rows of their own inside a loop over data (not a
`range` counter: an agent's states are not kept).
"""

from __future__ import annotations

import hashlib
import types
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn as nn

from .._frames import in_user_file, user_frame_of, user_stack_frame
from .._leakage._runtime._fingerprint import dense_keys
from .._loaderstream import stream
from .._loaderstream import tensors as batch_tensors
from ._epochs import MAX_KEYS, Loader
from ._heldlabels import data_loop, held_loop_frame
from ._heldnames import SPLIT_OR_EVAL
from ._streams import K as window_tokens
from ._streams import host_rows as _host
from ._streams import judge as judge_streams
from ._streams import stream_input, window_keys
from ._targets import Targets
from ._verdicts import _by_windows, _keys, _split_finding
from ._windows import slice_keys

if TYPE_CHECKING:
    from ._checker import DataLedger

SPLIT_SHARE = 0.01
MIN_ROWS = 8  # rows of an evaluation forward (an agent acting on one state is no evaluation set)
MIN_OVERLAP = 8
MAX_SLICE_ROWS = 1 << 16  # rows per side whose slices are also digested (windows of a series)
_HELD = SPLIT_OR_EVAL


def _ptr(t: torch.Tensor) -> tuple[int, int, tuple[int, ...], int]:
    try:
        return (t.untyped_storage().data_ptr(), int(t.storage_offset()), tuple(t.shape), t._version)
    except (RuntimeError, NotImplementedError):
        return (0, 0, (), 0)


class Side:
    def __init__(self) -> None:
        self.chunks: list[torch.Tensor] = []
        self.filled: list[torch.Tensor] = []  # evaluation side, per chunk: each row's non-zero cells
        self.repeats: list[int] = []  # per chunk: times the same tensor was given again
        self.padded: list[torch.Tensor] = []  # evaluation windows, per chunk: rows a 0/1 mask pads
        self.kept = 0
        self.shape: tuple[int, ...] | None = None
        self.frame: Any = None
        self.named = False  # rows of forwards inside a loop over data named held-out (an evaluation set)
        self.held_named = False  # an evaluation forward whose calling lines name held-out data (`model(val_data)`)
        self.slices: dict[int, list[torch.Tensor]] = {}  # axis -> per chunk, windows' slice digests (`_windows.py`)


class HandFed:
    def __init__(self, session: Any, ledger: DataLedger) -> None:
        self.ledger = ledger
        self.fresh = False
        self.fed: set[int] = set()  # storages of inputs a DataLoader batch fed
        self.batch: set[int] = set()  # storages of the latest DataLoader batch's tensors
        self.sides: dict[tuple[int, bool, bool], Side] = {}  # (model token, training, stream) -> its rows
        self.kept = 0
        # The tensors given last (by identity, checked through a weak reference): not digested again.
        self.last: dict[int, tuple[weakref.ref[torch.Tensor], tuple[Any, ...], Side, int]] = {}
        self.targets = Targets(self)
        stream(session).listen("ledger.handfed", self)

    def on_batch(self, it: Any, indices: Any, data: Any) -> None:
        self.fresh = True
        # Every tensor of the batch is a DataLoader's (a DPO batch's "chosen" and "rejected"
        # sequences feed two forwards each), not only the first forward's input.
        self.batch = {_ptr(t)[0] for t in batch_tensors(data)}

    def on_forward(self, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        inputs = batch_tensors((args, kwargs))
        if self.fresh:  # a DataLoader batch fed this forward (moved to the device, maybe)
            self.fresh = False
            self.fed = self.batch | {_ptr(t)[0] for t in inputs}
            return
        x = stream_input(inputs)  # token ids: known by their windows (`_streams.py`)
        windows = x is not None
        if x is None:
            x = next((t for t in inputs if t.dim() >= 2 and t.shape[0] > 0 and not t.is_complex()), None)
        single = x is None
        if single:  # one sample, unbatched (a loop over single rows): a row of its own
            x = next((t[None] for t in inputs if t.dim() == 1 and t.is_floating_point() and t.shape[0] > 0), None)
        if x is None or self.kept >= 2 * MAX_KEYS or _ptr(x)[0] in self.fed:
            return
        training = torch.is_grad_enabled() and not torch.is_inference_mode_enabled() and model.training
        if self.targets.on_forward(model, x, training):
            return  # another model's target on a training input (a teacher's): no evaluation
        if not training and not windows and x.shape[0] < MIN_ROWS:
            return
        ident = _ptr(x)
        seen = self.last.get(id(x))
        if seen is not None and seen[0]() is x and seen[1] == ident:
            seen[2].repeats[seen[3]] += 1  # the same tensor again (a validation tensor each epoch)
            return
        held_loop = None
        if training and not windows:
            # A forward with gradients inside a loop over held-out data (`for x, y in zip(X_test,
            # y_test):`) that nothing backpropagates is an evaluation; one that trains stays apart
            # from the training rows here (`_heldlabels.py` reports it).
            where = user_stack_frame(1)
            held_loop = held_loop_frame(where)
            training = held_loop is None
            if single and training and data_loop(where) is None:
                return  # single rows outside a loop over data (an agent's states): not kept
        token = self.ledger.token_of(model)
        side = self.sides.get((token, training, windows))
        if side is None:
            side = self.sides[(token, training, windows)] = Side()
        if side.kept >= MAX_KEYS:
            return
        if held_loop is not None:
            side.named = True
            if side.frame is None:
                side.frame = held_loop
        elif side.frame is None or not training:
            frames = _user_frames(3 if not training else 1, names=not training)
            if not training:
                text = " ".join(src for _, src in frames).lower()
                held = _HELD.search(text) is not None
                if "train" in text and not held:
                    return  # the training data measured on purpose
                if model.training and not held:
                    return  # no_grad in train() mode, unnamed: acting, targets (an agent's), not an evaluation
                if held:
                    side.named = True  # the calling lines name held-out data: an evaluation set, also when seen once
                    side.held_named = True
            if side.frame is None and frames:
                side.frame = frames[0][0]
        shape = (-1, window_tokens) if windows else tuple(x.shape[1:])
        if side.shape is None:
            side.shape = shape
        elif side.shape != shape:
            return  # rows of another shape (another input): one shape per side
        marks = (len(side.filled), len(side.padded), {a: len(v) for a, v in side.slices.items()})
        with torch.no_grad():
            keys = window_keys(x) if windows else dense_keys(x.detach())
            side.chunks.append(keys)
            if not training and not windows:
                side.filled.append((x.detach().reshape(x.shape[0], -1) != 0).sum(1))
            if not training and windows:
                side.padded.append(_padded_rows(x, inputs))
            if not windows and x.dim() in (3, 4) and x.is_floating_point() and side.kept < MAX_SLICE_ROWS:
                # windows of a series (`_windows.py`), on the side's first rows (a bounded cost)
                for axis, sk in slice_keys(x).items():
                    side.slices.setdefault(axis, []).append(sk)
        side.repeats.append(0)
        if not training:
            self.targets.evaluated(model, x, side, marks)
        side.kept += int(keys.shape[0])
        self.kept += int(keys.shape[0])
        if len(self.last) > 64:
            self.last.clear()
        self.last[id(x)] = (weakref.ref(x), ident, side, len(side.chunks) - 1)


def _padded_rows(x: torch.Tensor, inputs: list[torch.Tensor]) -> torch.Tensor:
    """Per row of the token ids `x`, on its device: an input of the same shape holding only 0 and
    1 (an attention mask) has a 0 in it: the row is a document padded to the batch's length."""
    rows = x.reshape(-1, x.shape[-1]).shape[0]
    for m in inputs:
        if m is not x and m.shape == x.shape and not m.is_floating_point() and not m.is_complex():
            m = m.detach().reshape(rows, -1)
            return (m == 0).any(1) & ((m == 0) | (m == 1)).all()
    return torch.zeros(rows, dtype=torch.bool, device=x.device)


SPLIT_NAMES = frozenset({"train", "training", "val", "valid", "validation", "test", "dev", "eval", "holdout"})


def _user_frames(most: int, names: bool = False) -> list[tuple[Any, str]]:
    """The innermost `most` frames of the user's code, each with its source line; with `names`,
    the line is followed by the split names its frame holds in string variables (``for split in
    ("train", "val"): X, Y = get_batch(split)``: the line says ``split``, the variable says which)."""
    f: types.FrameType | None = user_stack_frame(1)
    out: list[tuple[Any, str]] = []
    while f is not None and len(out) < most:
        if in_user_file(f):
            uf = user_frame_of(f)
            text = uf.source or ""
            if names:
                held = [v for v in f.f_locals.values() if isinstance(v, str) and v.lower() in SPLIT_NAMES]
                text = " ".join([text, *held])
            out.append((uf, text))
        f = f.f_back
    return out


def judge(hf: HandFed, loaders: list[Loader]) -> Any:
    """The split verdict over the rows of hand-fed forwards, per model (see the module docstring)."""
    for (token, training, windows), ev in hf.sides.items():
        if training or windows or not ev.chunks or ev.shape is None:
            continue
        found = _judge_model(ev, hf.sides.get((token, True, False)), token, loaders)
        if found is None:
            found = _judge_windows(ev, hf.sides.get((token, True, False)))
        if found is not None:
            return found
    return judge_streams(hf)


def _named_held_out(name: str) -> bool:
    low = name.lower()
    return "train" not in low and _HELD.search(low) is not None


def _judge_model(ev: Side, tr: Side | None, token: int, loaders: list[Loader]) -> Any:
    own = list(tr.chunks) if tr is not None and tr.shape == ev.shape else []
    # (a loader the user named held-out, zipped with the training one so its batches are present at a
    # training forward, is no source of training rows for the evaluation it feeds)
    trainers = [e for e in loaders if e.trains and token in e.models and e.row_shape == ev.shape and not e.ragged
                and not _named_held_out(e.name)]
    train_chunks = list(own)
    for e in trainers:
        k = _keys(e)
        if k is not None:
            train_chunks.append(k)
    if not train_chunks:
        return None
    ev_rows = _host(ev.chunks)
    ev_filled = _host(ev.filled) if len(ev.filled) == len(ev.chunks) else [np.zeros(0)] * len(ev_rows)
    tr_rows = _host(train_chunks)
    seen: dict[bytes, int] = {}
    kept: list[np.ndarray] = []
    fill: dict[int, np.ndarray] = {}  # kept chunk (by id) -> each row's non-zero cells
    repeated = False
    for rows, filled, again in zip(ev_rows, ev_filled, ev.repeats):
        digest = hashlib.blake2b(np.sort(rows).tobytes(), digest_size=16).digest()
        if again or digest in seen:
            repeated = True
        if digest not in seen:
            seen[digest] = len(kept)
            kept.append(rows)
            if filled.size == rows.size:
                fill[id(rows)] = filled
    within = [(r.size, np.unique(r).size) for r in (*kept, *tr_rows[:len(own)]) if r.size]
    rate = sum(n - u for n, u in within) / max(sum(n for n, _ in within), 1)
    tu = np.unique(np.concatenate(tr_rows))
    if len(kept) <= MAX_SOURCES:  # (an evaluation set is a few tensors; thousands are a stream of states)
        sizes = np.array([r.size for r in tr_rows], dtype=np.int64)
        train = (np.concatenate(tr_rows), np.repeat(np.arange(len(tr_rows)), sizes), sizes)
        kept = [r for r in kept if not _training_source(r, train, tu)]  # a training source measured
    if not kept:
        return None
    eu = np.unique(np.concatenate(kept))
    hit = np.isin(eu, tu)
    if all(id(r) in fill for r in kept):  # natural duplicates: rows with little content (padded, one-hot)
        rows_all = np.concatenate(kept)
        _, first = np.unique(rows_all, return_index=True)  # (in the order of eu)
        filled = np.concatenate([fill[id(r)] for r in kept])[first]
        hit &= filled * 2 >= np.median(filled)
    count, n = int(hit.sum()), int(eu.size)
    if count < MIN_OVERLAP or (count == n == tu.size):
        return None
    chance = min(1.0, collisions(kept) * tu.size)  # a new sample's row equal to a training row by chance
    if not (repeated or ev.named) or count < max(SPLIT_SHARE, 3 * rate, 3 * chance) * n:
        return None
    e = Loader("evaluation forwards", ev.frame, None, 0, 0, "", False)
    t = trainers[0] if trainers and not own else Loader("training forwards", tr.frame if tr else None, None, 0, 0,
                                                        "", False)
    example = int(np.flatnonzero(hit)[0])
    return _split_finding(e, t, count, n, example, "content", "error")


def _judge_windows(ev: Side, tr: Side | None) -> Any:
    """Hand-fed evaluation windows that share most of their steps with the same model's training
    windows (`_windows.py`): windows cut from one series with a short stride, then split (a k-fold
    over windows: each fold's model is evaluated once, on a tensor its line names held out)."""
    if tr is None or not ev.slices or not tr.slices or tr.shape != ev.shape:
        return None
    if not (ev.held_named or ev.named):
        return None  # (a stream of new rows, an agent's states, the training data measured again: no evaluation set)
    e = Loader("evaluation forwards", ev.frame, None, 0, 0, "", False)
    t = Loader("training forwards", tr.frame, None, 0, 0, "", False)
    e.slices, t.slices = ev.slices, tr.slices
    return _by_windows(e, t)


def collisions(chunks: list[np.ndarray]) -> float:
    """The probability that two distinct evaluation samples have equal rows: pairs of equal digests
    over pairs of rows, inside each evaluation forward (one pass gives each sample once, so equal
    rows there are equal content, not a sample drawn twice). Rows of a few ids (a knowledge graph's
    head entity, a user id) repeat at this rate, and a new sample's row then equals one of `U`
    distinct training rows with a probability of about `U` times it."""
    same = pairs = 0
    for rows in chunks:
        if rows.size < 2:
            continue
        _, counts = np.unique(rows, return_counts=True)
        same += int((counts * (counts - 1) // 2).sum())
        pairs += rows.size * (rows.size - 1) // 2
    return same / pairs if pairs else 0.0


MAX_SOURCES = 64  # distinct evaluation tensors tested as training sources (one search of the training rows each)
SOURCE_INSIDE = 0.99  # the training forwards that touch an evaluated tensor drew (almost) only from it
SOURCE_COVERED = 0.9  # ... and reached most of it (draws with replacement miss e^-k after k epochs' worth)


def _training_source(rows: np.ndarray, train: tuple[np.ndarray, np.ndarray, np.ndarray], tu: np.ndarray) -> bool:
    """An evaluation forward's rows are a training source, measured on purpose (train accuracy on the
    tensor the training batches were indexed from): the training forwards that share a row with it
    drew their rows from it (`SOURCE_INSIDE`), and they reached most of it (`SOURCE_COVERED`). An
    evaluation tensor that is a part of what training drew from (the training batches also hold
    other rows: a held-out part trained on) is not one. `train`: the training rows, each row's
    forward, and each forward's row count."""
    ev = np.unique(rows)
    if ev.size < MIN_ROWS or np.isin(ev, tu).mean() < SOURCE_COVERED:
        return False
    keys, chunk_of, sizes = train
    hit = np.isin(keys, ev)
    touched = np.unique(chunk_of[hit])
    total = int(sizes[touched].sum())
    return total > 0 and int(hit.sum()) >= SOURCE_INSIDE * total
