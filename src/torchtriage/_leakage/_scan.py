"""One streaming pass over a split: per-row digests and running statistics, never the rows.

Per row it keeps an 8-byte input digest, an 8-byte label digest (when labels are known), a
time as float64 (when a time key is given) and a near-duplicate signature (16 bytes for
numbers, 256 for texts). Per split: group → row count, per-column sums for the
preprocessing check, and the token set when a vocabulary is to be checked.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
import sys
import time as _time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._catalogue import msg
from ._hashing import (
    array_row_digests,
    cell_word,
    file_digest,
    float_words,
    key_of,
    object_words,
    row_digests,
    sample_digest,
    to_numpy,
)
from ._near import MIN_DIM, NUM_PERM, per_sample_normalize, reduce_images, simhash, text_of, text_signature
from ._sources import _NONE, Block, Source, Spec, sample_input, sample_label

_TOKEN = re.compile(r"\w+")
MAX_SHOWN_LABELS = 4096


@dataclasses.dataclass
class Options:
    groups: Spec | None
    time: Spec | None
    labels: Spec | None
    ignore: set[str]
    files: str | None
    near: bool
    tokens: bool
    stats: bool
    chunk: int
    progress: bool | None


class Stats:
    """Running count / sum / sum of squares / min / max per layout ("columns", "channels_first", ...)."""

    def __init__(self) -> None:
        self.acc: dict[str, list[np.ndarray]] = {}
        self.names: dict[str, list[str]] = {}

    def add(self, layout: str, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[0] == 0:
            return
        finite = np.isfinite(x)
        if finite.all():  # the common case, without nan-aware passes
            part = [np.full(x.shape[1], float(x.shape[0])), x.sum(0), np.einsum("ij,ij->j", x, x), x.min(0), x.max(0)]
        else:
            part = self._nan_part(x)
        self._merge(layout, part, x.shape[1])

    @staticmethod
    def _nan_part(x: np.ndarray) -> list[np.ndarray]:
        with np.errstate(invalid="ignore"):
            finite = np.isfinite(x)
            if finite.any():
                masked = np.where(finite, x, np.nan)
                lo, hi = np.nanmin(masked, 0), np.nanmax(masked, 0)
            else:
                lo, hi = np.full(x.shape[1], np.nan), np.full(x.shape[1], np.nan)
            return [finite.sum(0).astype(np.float64), np.nansum(x, 0), np.nansum(x * x, 0), lo, hi]

    def _merge(self, layout: str, part: list[np.ndarray], width: int) -> None:
        old = self.acc.get(layout)
        if old is None or len(old[0]) != width:
            if old is not None:  # ragged samples: the layout has no fixed width, drop it
                self.acc[layout] = [np.zeros(0)] * 5
                return
            self.acc[layout] = part
            return
        self.acc[layout] = [old[0] + part[0], old[1] + part[1], old[2] + part[2],
                            np.fmin(old[3], part[3]), np.fmax(old[4], part[4])]


@dataclasses.dataclass
class Part:
    """One chunk of one split as every engine stores it: rows ``start .. start + n``."""

    start: int
    n: int
    exact: np.ndarray                       # uint64 content digest per row
    labels: np.ndarray | None = None        # uint64 label word per row
    groups: list[str] | None = None         # group key per row (display form, `key_of`)
    times: np.ndarray | None = None         # float64 seconds per row (NaN: missing)
    sig: np.ndarray | None = None           # near-duplicate signature per row
    valid: np.ndarray | None = None         # rows whose signature may be compared


@dataclasses.dataclass
class Scan:
    source: Source
    n: int = 0
    exact: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.uint64))
    labels: np.ndarray | None = None
    label_shown: dict[int, str] = dataclasses.field(default_factory=dict)
    groups: Counter = dataclasses.field(default_factory=Counter)
    times: np.ndarray | None = None
    near_kind: str | None = None
    near_sig: np.ndarray | None = None
    near_valid: np.ndarray | None = None
    stats: Stats = dataclasses.field(default_factory=Stats)
    tokens: set[str] = dataclasses.field(default_factory=set)
    times_are_dates: bool = False


class _Shared:
    """What the first split (train) fixes for the others: feature columns and their scale."""

    def __init__(self) -> None:
        self.features: list[str] | None = None
        self.num_cols: list[str] | None = None
        self.text_col: str | None = None
        self.center: np.ndarray | None = None
        self.scale: np.ndarray | None = None

    def simhash(self, v: np.ndarray) -> np.ndarray:
        """SimHash of the rows standardized by train's first chunk (its mean and std)."""
        if self.center is None or self.scale is None:  # (set together)
            with np.errstate(invalid="ignore"):
                self.center = np.nan_to_num(np.nanmean(v, 0)) if len(v) else np.zeros(v.shape[1])
                sd = np.nan_to_num(np.nanstd(v, 0)) if len(v) else np.ones(v.shape[1])
            self.scale = np.where(sd > 1e-12, sd, 1.0)
        return simhash(v, self.center, self.scale)


def to_seconds(value: Any, name: str) -> float:
    """A time key as seconds: numbers, datetime/date, numpy datetime64, pandas Timestamp, ISO text."""
    if value is None:
        return np.nan
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, np.datetime64):
        return value.astype("datetime64[ns]").astype(np.int64) / 1e9
    if hasattr(value, "timestamp") and hasattr(value, "tzinfo"):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return float(value.timestamp())
    if isinstance(value, _dt.date):
        return float(_dt.datetime(value.year, value.month, value.day, tzinfo=_dt.timezone.utc).timestamp())
    if isinstance(value, str):
        s = value.strip()
        try:
            return float(s)
        except ValueError:
            pass
        try:
            return to_seconds(_dt.datetime.fromisoformat(s.replace("Z", "+00:00")), name)
        except ValueError:
            pass
    arr = to_numpy(value)
    if arr is not None and arr.size == 1:
        return float(arr.reshape(-1)[0])
    raise ValueError(msg("leakage.bad_time", name=name, value=repr(value)[:60]))


def _is_date(value: Any) -> bool:
    if isinstance(value, str):
        try:
            float(value)
            return False
        except ValueError:
            return True
    return isinstance(value, (_dt.date, np.datetime64)) or hasattr(value, "tzinfo")


def group_keys(values: Any) -> list[str]:
    """`key_of` for every value; whole-number columns and text columns without a call per row."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "biuf" and values.ndim == 1:
        v = values.astype(np.float64)
        if np.isfinite(v).all() and (v == np.floor(v)).all() and np.abs(v).max(initial=0) < 2**53:
            return v.astype(np.int64).astype(str).tolist()
    if isinstance(values, list) and set(map(type, values)) <= {str}:  # (map/set: no Python call per row)
        return values
    return [key_of(g) for g in values]


def label_word(value: Any) -> int:
    arr = to_numpy(value)
    if arr is not None and arr.size == 1:
        value = arr.reshape(-1)[0].item()
    return cell_word(value)


class Scanner:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.shared = _Shared()
        self._t0 = _time.monotonic()
        self._last = self._t0
        self.near_width: tuple[int, Any] = (0, np.uint64)  # signature columns, for engines that need a schema

    def _progress(self, name: str, done: int, total: int | None) -> None:
        now = _time.monotonic()
        if self.opts.progress is False or (self.opts.progress is None and now - self._last < 2.0):
            return
        self._last = now
        of = f"/{total}" if total else ""
        print(msg("leakage.progress", name=name, done=done, of=of, seconds=f"{now - self._t0:.0f}"),
              file=sys.stderr, flush=True)

    def parts(self, src: Source, sc: Scan | None = None) -> Iterator[Part]:
        """One `Part` per chunk of `src`: what every engine stores (digests, keys, signatures).

        `sc` collects what stays in Python whatever the engine: statistics, tokens, labels shown.
        """
        sc = sc if sc is not None else Scan(src)
        for block in src.blocks(self.opts.chunk):
            if block.n == 0:
                continue
            part = self.part(src, block, sc)
            self._progress(src.name, sc.n, src.n)
            yield part

    def part(self, src: Source, block: Block, sc: Scan) -> Part:
        """One chunk's `Part`; `sc` counts the rows and collects what stays in Python."""
        o = self.opts
        ex, near = self._inputs(src, block, sc)
        part = Part(block.start, block.n, ex)
        if near is not None:
            part.sig, part.valid = near[0], near[1]
        if o.labels is not None or block.auto_labels is not None or src.kind == "samples":
            part.labels = self._labels(src, block, sc)
        if o.groups is not None:
            part.groups = group_keys(o.groups.values(src, block))
        if o.time is not None:
            tv = o.time.values(src, block)
            if sc.n == 0 and len(tv) and not isinstance(tv[0], (int, float, np.integer, np.floating)):
                sc.times_are_dates = _is_date(tv[0])
            part.times = np.array([to_seconds(t, src.name) for t in tv], np.float64)
        sc.n += block.n
        return part

    def scan(self, src: Source) -> Scan:
        """The in-process scan: every part of `src` kept in numpy arrays."""
        sc = Scan(src)
        exact, labels, times, sigs, valid = [], [], [], [], []
        all_labels = True
        for part in self.parts(src, sc):
            exact.append(part.exact)
            if part.sig is not None and part.valid is not None:  # (set together)
                sigs.append(part.sig)
                valid.append(part.valid)
            if part.labels is None:
                all_labels = False
            else:
                labels.append(part.labels)
            if part.groups is not None:
                sc.groups.update(part.groups)
            if part.times is not None:
                times.append(part.times)
        sc.exact = np.concatenate(exact) if exact else np.zeros(0, np.uint64)
        if all_labels and labels and sum(len(x) for x in labels) == sc.n:
            sc.labels = np.concatenate(labels)
        if self.opts.time is not None:
            sc.times = np.concatenate(times) if times else np.zeros(0)
        if sigs and sum(len(s) for s in sigs) == sc.n:
            sc.near_sig, sc.near_valid = np.concatenate(sigs), np.concatenate(valid)
        return sc

    # --- inputs: exact digest + near signature + stats + tokens ---------------------------
    def _inputs(self, src: Source, block: Block, sc: Scan) -> tuple[np.ndarray, Any]:
        if src.kind == "table":
            return self._table(src, block, sc)
        if src.kind == "array":
            vals = block.values
            assert vals is not None  # an array source's blocks carry their values
            self._array_stats(vals, sc)
            return array_row_digests(vals), self._near_arrays(vals, sc)
        if block.inputs is not None:
            vals = block.inputs
            self._array_stats(vals, sc)
            flat = float_words(vals.reshape(vals.shape[0], -1))
            import hashlib
            import struct

            head = b"A" + struct.pack(f"<{vals.ndim - 1}q", *vals.shape[1:])
            ex = np.fromiter((int.from_bytes(hashlib.blake2b(head + flat[i].tobytes(), digest_size=8).digest(),
                                             "little") for i in range(vals.shape[0])), np.uint64, vals.shape[0])
            return ex, self._near_arrays(vals, sc)
        from_list = type(src.root).__name__ == "_ListDataset"
        drop = frozenset(s.column for s in (self.opts.groups, self.opts.time, self.opts.labels)
                         if s is not None and s.column)
        inputs = [sample_input(s, from_list, drop) for s in block.samples]  # type: ignore[union-attr]
        ex = np.fromiter((sample_digest(x) for x in inputs), np.uint64, len(inputs))
        return ex, self._near_samples(inputs, sc)

    def _table(self, src: Source, block: Block, sc: Scan) -> tuple[np.ndarray, Any]:
        cols = block.cols or {}
        sh = self.shared
        o = self.opts
        if sh.features is None:
            roles = {s.column for s in (o.groups, o.time, o.labels) if s is not None and s.column}
            sh.features = sorted(c for c in cols if c not in roles and c not in o.ignore)
        missing = [c for c in sh.features if c not in cols]
        if missing:
            raise ValueError(msg("leakage.missing_features", name=src.name, columns=", ".join(missing[:10]),
                                 accepted=", ".join(sorted(cols)[:20])))
        words, numeric = [], {}
        for c in sh.features:
            if c == o.files:
                words.append(np.fromiter((file_digest(str(p)) for p in cols[c]), np.uint64, block.n))
                continue
            w = object_words(cols[c])
            words.append(w)
            try:
                numeric[c] = np.asarray(cols[c], dtype=np.float64)
            except (ValueError, TypeError):
                pass
        ex = row_digests(words, (len(sh.features),))
        if sh.num_cols is None:
            sh.num_cols = [c for c in sh.features if c in numeric]
            text = [c for c in sh.features if c not in numeric and c != o.files]
            sh.text_col = text[0] if len(text) == 1 and not sh.num_cols else None
        if sh.num_cols:
            mat = np.stack([numeric.get(c, np.full(block.n, np.nan)) for c in sh.num_cols], axis=1)
            if self.opts.stats:
                sc.stats.add("columns", mat)
            sc.stats.names["columns"] = list(sh.num_cols)
        if o.tokens:
            for c in sh.features:
                if c not in numeric:
                    for cell in cols[c]:
                        if isinstance(cell, str):
                            sc.tokens.update(_TOKEN.findall(cell))
        if not o.near:
            return ex, None
        if sh.text_col is not None:
            return ex, self._texts(list(cols[sh.text_col]), sc)
        if sh.num_cols and len(sh.num_cols) >= MIN_DIM:
            sc.near_kind = "num"
            return ex, (sh.simhash(mat), np.isfinite(mat).all(axis=1))
        return ex, None

    def _array_stats(self, vals: np.ndarray, sc: Scan) -> None:
        if not self.opts.stats:
            return
        sc.stats.add("all", vals.reshape(-1, 1) if vals.size < 50_000_000 else vals[:1].reshape(-1, 1))
        if vals.ndim == 2:
            sc.stats.add("columns", vals)
        elif vals.ndim >= 3:
            sc.stats.add("channels_first", np.moveaxis(vals, 1, -1).reshape(-1, vals.shape[1]))
            sc.stats.add("channels_last", vals.reshape(-1, vals.shape[-1]))

    def _near_arrays(self, vals: np.ndarray, sc: Scan) -> Any:
        if not self.opts.near or vals.ndim < 2:
            return None
        per = int(np.prod(vals.shape[1:]))
        if per < MIN_DIM:
            return None
        sc.near_kind = "num"
        if vals.ndim == 2 and per <= 1024:  # table-like rows: columns keep their own scale
            return self.shared.simhash(np.asarray(vals, np.float64)), np.isfinite(vals).all(axis=1)
        v, ok = per_sample_normalize(reduce_images(vals))
        return simhash(v), ok

    def _near_samples(self, inputs: list[Any], sc: Scan) -> Any:
        texts = [text_of(x) for x in inputs]
        if self.opts.tokens:
            for t in texts:
                if t:
                    sc.tokens.update(_TOKEN.findall(t))
        if any(t is not None for t in texts):
            return self._texts(inputs, sc) if self.opts.near else None
        arrays = [to_numpy(x) for x in inputs]
        shapes = {a.shape for a in arrays if a is not None and a.dtype.kind in "biuf"}
        if len(shapes) == 1:
            stacked = np.stack([np.asarray(a, np.float64) for a in arrays])
            self._array_stats(stacked, sc)
            if self.opts.near and all(a is not None for a in arrays):
                return self._near_arrays(stacked, sc)
        return None

    def _texts(self, cells: list[Any], sc: Scan) -> Any:
        sc.near_kind = "text"
        sig = np.zeros((len(cells), NUM_PERM), np.uint32)
        ok = np.zeros(len(cells), bool)
        for i, c in enumerate(cells):
            t = text_of(c)
            if t is not None:
                sig[i] = text_signature(t)
                ok[i] = True
        if self.opts.tokens and self.shared.text_col is not None:
            pass  # table tokens were collected in _table
        return sig, ok

    def _labels(self, src: Source, block: Block, sc: Scan) -> np.ndarray | None:
        o = self.opts
        if o.labels is not None:
            vals = o.labels.values(src, block)
        elif block.auto_labels is not None:
            vals = list(block.auto_labels)
        elif src.kind == "samples" and block.samples is not None:
            from_list = type(src.root).__name__ == "_ListDataset"
            vals = [sample_label(s, from_list) for s in block.samples]
            if any(v is _NONE for v in vals):
                return None
        else:
            return None
        if isinstance(vals, np.ndarray) and vals.dtype.kind in "biuf" and vals.ndim == 1:
            # A numeric column: the same words as `label_word`, without a Python call per row.
            words = float_words(vals)
            if len(sc.label_shown) < MAX_SHOWN_LABELS:
                _, first = np.unique(words, return_index=True)
                for i in np.sort(first).tolist():
                    sc.label_shown.setdefault(int(words[i]), key_of(float(vals[i])))
            return words
        words = np.fromiter((label_word(v) for v in vals), np.uint64, len(vals))
        if len(sc.label_shown) < MAX_SHOWN_LABELS:
            for w, v in zip(words.tolist(), vals):
                if w not in sc.label_shown:
                    arr = to_numpy(v)
                    sc.label_shown[w] = key_of(arr.reshape(-1)[0].item() if arr is not None and arr.size == 1 else v)
                    if len(sc.label_shown) >= MAX_SHOWN_LABELS:
                        break
        return words
