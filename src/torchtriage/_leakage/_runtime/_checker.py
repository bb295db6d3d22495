"""`LeakageWatch` (registry name "leakage"): data leakage seen while the script runs (issue 14).

It learns the splits from the calls that make them (`_patches.py`: torch `Subset` /
`random_split`, scikit-learn's splitters and `train_test_split`, `randperm` index splits) and
the preprocessing fits (scikit-learn scalers, encoders, vectorizers), fingerprints each split's
rows once (`_base.Base`), then fingerprints the model's input rows at each root forward on their
device: rows of a forward whose output a backward reached, followed by an optimizer step, are
"trained on" (a forward in training mode whose output nobody backpropagates, such as a Bayesian
network's sampled test predictions, trained nothing); rows of a forward under no_grad /
inference_mode / eval() are "evaluated". Costs: nothing at all until a split is
seen; then per batch a few elementwise integer kernels, a searchsorted and a scatter, no host
read. Split-time numbers ride the session's per-step read; the verdicts read once, at the end.
Until a split (or a permutation that may make one) is seen, the check sits every step out
(`wants_step`); from then on it takes part in every step, so its counts of rows trained on and
evaluated stay exact.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn as nn

from ... import _deferred
from ..._checker import Checker
from ..._frames import UserFrame
from ..._reach import when_reached
from ._base import Base, Draw
from ._fingerprint import row_keys
from ._loaders import LoaderIndex
from ._patches import install as install_patches
from ._verdicts import Fit, conclude, queue_duplicates, queue_statistics


class LeakageWatch(Checker):
    """Runtime leakage checks: held-out rows trained on, rows on both sides of a split, splits
    redrawn over the same data, statistics or fits computed before the split."""

    name = "leakage"

    def on_start(self, session: Any) -> None:
        self.flags = _deferred.DeferredFlags()
        _deferred.ride(session, self.flags)
        self.bases: list[Base] = []
        self.fits: list[Fit] = []
        # train candidates of this step, each with its forward's "a backward reached the output"
        self.pending: list[tuple[int, Base, torch.Tensor, list[bool] | None]] = []
        self.redraws: dict[int, list[Draw]] = {}  # id(base) -> draws that redrew it
        self._families = 0
        self.tokens: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()
        self.labels: dict[int, str] = {}
        self.patches = install_patches(session, self)
        self.loaders = LoaderIndex(session, self)
        self.loaders.install()

    # ------------------------------------------------------------------ splits
    def base_for(self, obj: Any, rows: Any) -> Base | None:
        """The base of `obj`'s rows; `rows` None: a dataset known by its indices only."""
        for b in self.bases:
            if b.alive(obj):
                return b
        if rows is None:
            try:
                n = len(obj)
            except TypeError:
                return None
            if n < 2:
                return None
            self.bases.append(Base.indexed(obj, n))
            return self.bases[-1]
        if not _rows(rows):
            return None
        n = len(rows) if not hasattr(rows, "shape") else int(rows.shape[0])
        if n < 2:
            return None
        with torch.no_grad():
            keys = row_keys(rows)
        if keys is None:
            return None
        base = Base(obj, rows, n, keys)
        self.bases.append(base)
        return base

    def new_family(self) -> int:
        self._families += 1
        return self._families

    def observe(self, obj: Any, rows: Any, parts: list[Any], frame: UserFrame | None, kind: str, *,
                train: int | None = None, family: int = 0) -> Draw | None:
        """A split of `rows` (owned by `obj`) into `parts` (base indices); `train` names the
        training part when the API says so, else the largest part is taken as training."""
        base = self.base_for(obj, rows)
        if base is None:
            return None
        idx = [torch.as_tensor(p, dtype=torch.int64).reshape(-1).cpu() for p in parts]
        if train is None:
            sizes = [p.numel() for p in idx]
            train = sizes.index(max(sizes))
        step = self.session.step if self.session is not None else 0
        draw = Draw(base, kind, frame, family, step, idx, train)
        same = [d for d in base.draws if d.family == 0 and family == 0]
        if same and _same_parts(same[-1], draw):
            return same[-1]  # a fixed seed draws the same split again: nothing new
        if same:
            self.redraws.setdefault(id(base), []).append(draw)
        with torch.no_grad():
            base.add_draw(draw)
            if draw.side is not None and len(draw.parts) > 1 and not base.by_index:
                queue_duplicates(self, draw)
                if not base.stats_done:
                    base.stats_done = True
                    queue_statistics(self, draw)
        return draw

    def extend_subset(self, dataset: Any, rows: Any, indices: Any, frame: UserFrame | None, kind: str) -> None:
        """A `Subset` made by hand or by random_split: the parts of one draw arrive one by one.
        A part disjoint from the open draw of its dataset joins it (also after training steps:
        a validation Subset is often made after the training loop that used its sibling)."""
        base = self.base_for(dataset, rows)
        if base is None:
            return
        idx = torch.as_tensor(indices, dtype=torch.int64).reshape(-1).cpu()
        last = base.draws[-1] if base.draws else None
        parts, where = [idx], frame
        if last is not None and last.open:
            covered = torch.zeros(base.n, dtype=torch.bool)
            for p in last.parts:
                covered[p] = True
            if not covered[idx].any():
                base.draws.remove(last)
                redrawn = self.redraws.get(id(base), [])
                if last in redrawn:
                    redrawn.remove(last)
                parts, where, kind = [*last.parts, idx], last.frame, last.kind
        draw = self.observe(dataset, rows, parts, where, kind)
        if draw is not None:
            draw.open = sum(p.numel() for p in draw.parts) < base.n

    # ------------------------------------------------------------------ preprocessing fits
    def observe_fit(self, estimator: Any, X: Any, out: Any, frame: UserFrame | None) -> None:
        with torch.no_grad():
            fit = Fit.make(estimator, X, out, frame)
        if fit is not None:
            self.fits = [f for f in self.fits if f.ref() is not None and f.ref() is not estimator] + [fit]

    def observe_transform(self, estimator: Any, Z: Any, out: Any) -> None:
        for fit in self.fits:
            if fit.ref() is estimator:
                with torch.no_grad():
                    fit.derive(Z, out)
                return

    # ------------------------------------------------------------------ batches
    def wants_step(self, step: int) -> bool:
        # (a split is made between steps: before the loop, or per epoch before its first batch)
        try:
            return bool(self.bases or self.patches.perms)
        except AttributeError:  # on_start did not finish (our bug, already reported)
            return True

    def on_root_forward(self, model: nn.Module, label: str, args: tuple[Any, ...],
                        kwargs: dict[str, Any], output: Any) -> None:
        self.patches.settle()
        if not self.bases:
            return
        evaluating = not torch.is_grad_enabled() or torch.is_inference_mode_enabled() or not model.training
        token = self.token(model, label)
        reached = None if evaluating else _backward_reached(output)
        with torch.no_grad():
            for batch in self.loaders.feeding(args, kwargs):
                pos = batch.base.index_positions(batch.rows)
                if pos is not None:
                    self.record(batch.base, token, pos, evaluating, reached)
        x = _batch(args, kwargs)
        if x is None:
            return
        bases = [b for b in self.bases if not b.by_index and b.row_shape == tuple(x.shape[1:]) and b.draws]
        if not bases:
            return
        with torch.no_grad():
            keys = row_keys(x)
            if keys is None:
                return
            for b in bases:
                self.record(b, token, b.positions(keys), evaluating, reached)

    def token(self, model: nn.Module, label: str) -> int:
        token = self.tokens.get(model)
        if token is None:
            token = self.tokens[model] = len(self.labels) + 1
            self.labels[token] = label or type(model).__name__
        return token

    def record(self, base: Base, token: int, pos: torch.Tensor, evaluating: bool,
               reached: list[bool] | None = None) -> None:
        """Rows a forward saw: evaluated now, trained on once a backward reached the forward's
        output (`reached`; None: not watchable, taken as reached) and an optimizer step follows."""
        if evaluating:
            base.mark(base.evaluated, token, pos)
        else:
            self.pending.append((token, base, pos, reached))

    def on_optimizer_step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        if not self.pending:  # (most steps: no tracked dataset's rows in the batch)
            return
        pending, self.pending = self.pending, []
        with torch.no_grad():
            for token, b, pos, reached in pending:
                if reached is None or reached[0]:
                    b.mark(b.trained, token, pos)

    def on_step_end(self, step: int) -> None:
        self.pending.clear()
        self.flags.resolve()

    def on_end(self) -> None:
        self.patches.close()
        self.flags.resolve()
        with torch.no_grad():
            conclude(self)


def _rows(rows: Any) -> bool:
    """Rows worth fingerprinting: 2-d or more, or texts. A vector of numbers is labels or
    targets, whose repeated values are expected (never "duplicates")."""
    if isinstance(rows, (list, tuple)):
        return bool(rows) and isinstance(rows[0], (str, bytes))
    ndim = getattr(rows, "ndim", None)
    if ndim is None:
        return False
    if ndim >= 2:
        return True
    return ndim == 1 and getattr(getattr(rows, "dtype", None), "kind", "") in ("U", "S", "O")


def _same_parts(a: Draw, b: Draw) -> bool:
    return len(a.parts) == len(b.parts) and all(
        x.numel() == y.numel() and torch.equal(x, y) for x, y in zip(a.parts, b.parts))


def _batch(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    for v in (*args, *kwargs.values()):
        if isinstance(v, torch.Tensor):
            return v if v.dim() >= 1 and v.shape[0] > 0 else None
    return None



def _backward_reached(output: Any) -> list[bool] | None:
    """A flag that a backward reaching the forward's output sets (`_reach.when_reached`); None
    when the output has no graph."""
    flag = [False]

    def arrived() -> None:
        flag[0] = True

    return flag if when_reached(output, arrived) else None
