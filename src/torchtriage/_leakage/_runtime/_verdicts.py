"""The runtime leakage verdicts: numbers computed on the device, judged after one read.

* `queue_duplicates` (at a split): held-out rows whose content is also on the training side
  → `data.exact_duplicate` (oversampling or augmentation before the split);
* `queue_statistics` (at a base's first split): all rows standardized to mean 0 / std 1 to
  float precision while the training part is not → `data.preprocessing_fit_on_all`: an error
  when the training part's column means are further from 0 than a random part of its size
  would be (`CHANCE_SIGMAS`), else an info (the leak moved nothing measurable);
* `conclude` (at the end, one read): held-out rows a model was trained on →
  `data.heldout_trained`; a split redrawn over the same data → `data.split_redrawn`; a fitted
  scikit-learn preprocessor whose rows include held-out rows of every draw →
  `data.preprocessing_fit_on_all`.
A model (or a fit) that used only the training side of some draw is fine: k-fold
cross-validation trains one model per fold, and each is compared with its own fold.
"""

from __future__ import annotations

import dataclasses
import linecache
import math
import weakref
from typing import TYPE_CHECKING, Any

import torch

from ..._deferred import read_scalars
from ..._findings import Finding, from_catalogue
from ..._frames import UserFrame
from ._base import HELD, SKETCH_ROWS, Base, Draw
from ._fingerprint import row_keys
from ._statsline import statistics_line

if TYPE_CHECKING:
    from ._checker import LeakageWatch

MEAN_TOL = 1e-5  # |mean| of a standardized column (float32 rounding leaves ~1e-7)
STD_TOL = 1e-4  # |std - 1|, population or sample std
TRAIN_TOL = 1e-4  # a training part's |mean| above this is not standardized on its own
# A random part of m of n standardized rows has column means of std sqrt((n - m) / ((n - 1) m));
# beyond this many of them, the split itself separated different rows.
CHANCE_SIGMAS = 4.0


def _finding(code: str, severity: str, key: str, draw: Draw, evidence: dict[str, Any], frame: UserFrame | None = None,
             **fields: Any) -> Finding:
    fields.setdefault("where", draw.where)
    fields.setdefault("kind", draw.kind)
    return from_catalogue("data", f"data.{code}", f"leakage.run.{key}.message", fields=fields,
                          cause_key=f"leakage.run.{key}.cause", next_key=f"leakage.run.{key}.next",
                          frame=frame or draw.frame,
                          evidence={"split": draw.where, "split_call": draw.kind, **evidence},
                          severity=severity, stage="data")


def _on(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    return t if t.device == device else t.to(device)


def _about(count: float, rate: int) -> int:
    return int(round(count * rate))


def _first_true(mask: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """values[i] of the first True of `mask` (values[0] when none), without a host read."""
    return values[torch.argmax(mask.to(torch.uint8))]


def queue_duplicates(watch: LeakageWatch, draw: Draw) -> None:
    base = draw.base
    train_keys = base.part_keys(draw.parts[draw.train])
    held = torch.cat(draw.held())
    held_keys = base.part_keys(held)
    if train_keys is None or held_keys is None:
        return
    in_train = torch.zeros(base.m + 1, dtype=torch.bool, device=base.device)
    in_train.index_fill_(0, base.positions(_on(train_keys, base.device)), True)
    in_train[base.m] = False
    hit = in_train[base.positions(_on(held_keys, base.device))]
    values = [hit.sum(), _first_true(hit, _on(held, hit.device))]

    def judge(v: list[float]) -> None:
        if v[0] <= 0 or draw not in base.draws or watch.session is None:
            return
        n = held.numel()
        count = min(_about(v[0], base.rate), n)
        watch.session.add(_finding(
            "exact_duplicate", "warning", "duplicate", draw,
            {"count": count, "held_out_rows": n, "example_index": int(v[1]), "estimated": base.rate > 1},
            count=count, n=n, share=f"{100.0 * count / n:.1f}%", example=int(v[1])))

    watch.flags.add(values, judge)


def _moments(rows: torch.Tensor, idx: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, int]:
    n = rows.shape[0] if idx is None else idx.numel()
    s = torch.zeros(rows.shape[1], dtype=torch.float64, device=rows.device)
    ss = torch.zeros_like(s)
    step = max(1, (1 << 22) // max(rows.shape[1], 1))
    for i in range(0, n, step):
        c = rows[i:i + step] if idx is None else rows[idx[i:i + step].to(rows.device)]
        c = c.to(torch.float64)
        s += c.sum(0)
        ss += (c * c).sum(0)
    mean = s / n
    var = (ss / n - mean * mean).clamp_(min=0)
    return mean, var, n


def queue_statistics(watch: LeakageWatch, draw: Draw) -> None:
    rows = _table(draw.base.rows())
    if rows is None:
        return
    mean, var, n = _moments(rows, None)
    std0, std1 = var.sqrt(), (var * n / max(n - 1, 1)).sqrt()
    live = std0 > 1e-12
    std_ok = torch.minimum((std0 - 1).abs(), (std1 - 1).abs()) < STD_TOL
    full = (live.any() & ((mean.abs() < MEAN_TOL) | ~live).all() & (std_ok | ~live).all())
    tmean, _, _ = _moments(rows, draw.parts[draw.train])
    dev = torch.where(live, tmean.abs(), torch.zeros_like(tmean)).max()
    columns = int(rows.shape[1])
    # A recorded scikit-learn fit over these rows is reported by name at the end instead.
    fitted = torch.zeros((), device=full.device)
    for fit in watch.fits:
        fitted = fitted + _on(torch.isin(draw.base.uk, _on(fit.all_keys(), draw.base.device)).sum(), full.device)

    m = int(draw.parts[draw.train].numel())
    chance = CHANCE_SIGMAS * math.sqrt(max(n - m, 0) / (max(n - 1, 1) * max(m, 1)))

    def judge(v: list[float]) -> None:
        if v[0] < 1 or v[1] <= TRAIN_TOL or v[2] > 0 or watch.session is None:
            return
        # Harm: the held-out rows moved the statistics the training rows were scaled with by more
        # than a random split of this size would (a split by time or by group); within that, the
        # leak is real but changed nothing measurable here.
        evidence: dict[str, Any] = {"rows": n, "columns": columns, "train_rows": m,
                                    "train_max_abs_mean": round(v[1], 6), "random_split_max_abs_mean": round(chance, 6)}
        frame = draw.frame
        at = statistics_line(frame.file, frame.line) if frame is not None else None
        if frame is not None and at is not None:
            # the line to change is the one that took the statistics, before the split
            frame = dataclasses.replace(frame, line=at, source=linecache.getline(frame.file, at).strip())
            evidence["statistics_at"] = f"{frame.file}:{at}"
        watch.session.add(_finding(
            "preprocessing_fit_on_all", "error" if v[1] > chance else "info", "stats", draw, evidence,
            frame=frame, n=n, train_mean=f"{v[1]:.3g}"))

    watch.flags.add([full, dev, fitted], judge)


def _table(rows: Any) -> torch.Tensor | None:
    import numpy as np

    if isinstance(rows, np.ndarray) and rows.dtype.kind == "f":
        rows = torch.from_numpy(rows)
    if isinstance(rows, torch.Tensor) and rows.dim() == 2 and rows.is_floating_point() and rows.shape[0] >= 8:
        return rows
    return None


@dataclasses.dataclass
class Fit:
    """A scikit-learn preprocessor's fit: the digests of the rows it saw (a sample above
    `SKETCH_ROWS`), and of its outputs for those rows (what a later split would hold)."""

    ref: Any
    name: str
    frame: UserFrame | None
    keys: torch.Tensor  # sorted, on the CPU
    rate: int
    derived: list[torch.Tensor]

    @classmethod
    def make(cls, estimator: Any, X: Any, out: Any, frame: UserFrame | None) -> Fit | None:
        keys = row_keys(X)
        if keys is None:
            return None
        keys = keys.cpu()
        rate = 1
        while keys.numel() // rate > SKETCH_ROWS:
            rate *= 2
        try:
            ref = weakref.ref(estimator)
        except TypeError:
            return None
        fit = cls(ref, type(estimator).__name__, frame, torch.unique(keys[(keys & (rate - 1)) == 0]), rate, [])
        if out is not None:
            outk = row_keys(out)
            if outk is not None and outk.numel() == keys.numel():
                fit.derived.append(torch.unique(outk.cpu()[(keys & (rate - 1)) == 0]))
        return fit

    def derive(self, Z: Any, out: Any) -> None:
        zk, ok = row_keys(Z), row_keys(out)
        if zk is None or ok is None or zk.numel() != ok.numel() or sum(d.numel() for d in self.derived) > SKETCH_ROWS:
            return
        seen = torch.isin(zk.cpu(), self.keys)
        self.derived.append(torch.unique(ok.cpu()[seen]))

    def all_keys(self) -> torch.Tensor:
        return torch.unique(torch.cat([self.keys, *self.derived]))


def conclude(watch: LeakageWatch) -> None:
    """Everything left to judge at the end, with one read."""
    if watch.session is None:
        return
    plans: list[tuple[Any, int]] = []  # (callback, how many numbers)
    values: list[torch.Tensor] = []
    for base in watch.bases:
        draws = [d for d in base.draws if d.side is not None and len(d.parts) > 1]
        if not draws:
            continue
        only_held = [(side == HELD)[:base.m] for d in draws if (side := d.side) is not None]  # all of draws
        for token, trained in list(base.trained.items()):
            tr = trained[:base.m].bool()
            ev = base.evaluated.get(token)
            for h in only_held:
                hits = _on(h, tr.device) & tr
                values += [hits.sum(), _first_true(hits, _on(base.first, tr.device)),
                           (_on(h, tr.device) & _on(ev[:base.m].bool(), tr.device)).sum() if ev is not None
                           else torch.zeros((), device=tr.device)]
            plans.append((_trained_verdict(watch, base, draws, watch.labels.get(token, "model")), 3 * len(draws)))
        for fit in watch.fits:
            keys = _on(fit.all_keys(), base.device)
            rate = max(base.rate, fit.rate)
            sampled = (base.uk & (rate - 1)) == 0
            inside = torch.isin(base.uk, keys) & sampled
            for h in only_held:
                hits = h & inside
                values += [hits.sum(), _first_true(hits, base.first)]
            plans.append((_fit_verdict(watch, base, draws, fit, rate), 2 * len(draws)))
    read = read_scalars(values) if values else []
    at = 0
    for callback, k in plans:
        callback(read[at:at + k])
        at += k
    for base in watch.bases:
        redrawn = watch.redraws.get(id(base), [])
        if redrawn:
            _redraw_verdict(watch, base, redrawn)


def _trained_verdict(watch: LeakageWatch, base: Base, draws: list[Draw], label: str) -> Any:

    def judge(v: list[float]) -> None:
        rows = [(v[3 * i], v[3 * i + 1], v[3 * i + 2]) for i in range(len(draws))]
        if min(r[0] for r in rows) <= 0 or watch.session is None:
            return  # the model kept to the training side of some draw (one model per fold)
        evaluated = [i for i, r in enumerate(rows) if r[2] > 0]
        i = evaluated[-1] if evaluated else len(draws) - 1
        d = draws[i]
        n = sum(int(p.numel()) for p in d.held())
        count = min(_about(rows[i][0], base.rate), n)
        watch.session.add(_finding(
            "heldout_trained", "error", "trained", d,
            {"count": count, "held_out_rows": n, "example_index": int(rows[i][1]), "draws": len(draws),
             "model": label, "estimated": base.rate > 1},
            count=count, n=n, share=f"{100.0 * count / max(n, 1):.1f}%", example=int(rows[i][1]), model=label))

    return judge


def _fit_verdict(watch: LeakageWatch, base: Base, draws: list[Draw], fit: Fit, rate: int) -> Any:
    def judge(v: list[float]) -> None:
        rows = [(v[2 * i], v[2 * i + 1]) for i in range(len(draws))]
        if min(r[0] for r in rows) <= 0 or watch.session is None:
            return  # fitted on the training side of some draw
        d = draws[-1]
        n = sum(int(p.numel()) for p in d.held())
        count = min(_about(rows[-1][0], rate), n)
        fitted_at = f"{fit.frame.file}:{fit.frame.line}" if fit.frame else "?"
        watch.session.add(_finding(
            "preprocessing_fit_on_all", "error", "fit", d,
            {"preprocessor": fit.name, "fitted_at": fitted_at, "count": count, "held_out_rows": n,
             "example_index": int(rows[-1][1]), "estimated": rate > 1},
            what=fit.name, fitted_at=fitted_at, count=count, n=n, example=int(rows[-1][1])))

    return judge


def _folds(draws: list[Draw]) -> bool:
    """The draws' held-out parts partition the rows the draws cover: every row held out exactly
    once, as k-fold cross-validation does (one Subset pair per fold, by hand or from a splitter's
    indices); redraws of a random split overlap instead."""
    held = [p for d in draws for p in d.held()]
    if len(draws) < 2 or not held:
        return False
    rows = torch.cat(held)
    covered = torch.unique(torch.cat([p for d in draws for p in d.parts]))
    return int(torch.unique(rows).numel()) == rows.numel() == covered.numel()


def _redraw_verdict(watch: LeakageWatch, base: Base, redrawn: list[Draw]) -> None:
    if watch.session is None:
        return
    first = next((d for d in base.draws if d not in redrawn), redrawn[0])
    if _folds([d for d in base.draws if len(d.parts) > 1 and (d is first or d in redrawn)]):
        return
    in_loop = any(d.steps > first.steps for d in redrawn)
    # Harm (session 8): a redraw during training matters when a model trained on rows a draw held
    # out (`data.heldout_trained`, judged just before); redraws whose models kept to a training
    # side (episodes drawn afresh from one pool, support and query both trained) are info.
    harmed = any(f.code == "data.heldout_trained" for f in watch.session.findings)
    d = redrawn[-1]
    draws = len(redrawn) + 1
    watch.session.add(_finding(
        "split_redrawn", "warning" if in_loop and harmed else "info", "redrawn", first,
        {"draws": draws, "during_training": in_loop, "last_draw": d.where, "rows": base.n},
        draws=draws, last=d.where))
