"""An evaluation loader delivers the same input for a sample in every pass.

Its metric measures the model: two passes over the same samples with the same model give the
same number. A validation split carved out of the training dataset by sampler or `Subset`
keeps the training dataset's `transform` (random crops, flips, noise), so every pass evaluates
other random views: the per-epoch metric that picks the best epoch is partly augmentation
noise, and it is measured on training-distribution inputs, not on the data the model will see.

Measured: in a loader's first pass and, when that pass reached no backward (an evaluation loader),
in its second, each batch's per-sample tensor of values (floating-point images, signals, features,
and integer ones: uint8 images scaled after the loader, int16 audio, integer samples of two or
more axes; token ids, integer rows of one axis, are left out: a masked-language-model collator
masks evaluation batches at random on purpose) is digested on its device per root index
(`dense_keys`, at most `MOST` rows a pass), read once at the end. Samples of both passes whose
digests differ changed between passes. A warning when at least `SHARE` of the samples compared
changed (and `MIN` samples) and the loader reads the dataset a training loader reads (a split
carved out of it, with its transform): a deterministic evaluation changes none; an evaluation
dataset of its own that draws at random (pairs, sampling by design) is an info, and so is one
whose changed samples hold the same values, only moved (a random flip, a rotation by quarter
turns: each sample's sum, sum of squares and sum of cubes, `moments`, agree), which measures the
same data in every pass, seen from a symmetry. A loader that evaluates only samples a training
loader trained on (train accuracy) is left alone, and so is one drawn by a sampler or batch
sampler of the user's that draws (its two passes' index orders differ: an episode sampler's index
names a class whose samples are drawn at random on purpose); one that replays an index list
(`SubsetSampler(valid_idx)`) is judged.
The line is where the loader was made.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._leakage._runtime._fingerprint import dense_keys
from .._loaderstream import tensors as batch_tensors
from ._epochs import Loader
from ._evaldraw import dataset_line, probe
from ._make import finding
from ._make import label as _label

if TYPE_CHECKING:
    from ._checker import DataLedger

MOST = 4096  # rows digested per pass
SHARE = 0.5
MIN = 8


@dataclasses.dataclass(eq=False)
class _Draws:
    roots: list[np.ndarray] = dataclasses.field(default_factory=list)
    keys: list[torch.Tensor] = dataclasses.field(default_factory=list)
    moments: list[torch.Tensor] = dataclasses.field(default_factory=list)
    rows: int = 0


class Repeatable:
    """A listener of the loader stream (after the ledger's follower: its passes and indices)."""

    def __init__(self, ledger: DataLedger) -> None:
        self.ledger = ledger
        self.draws: dict[tuple[int, int], _Draws] = {}  # (id of the Loader entry, pass) -> digests
        self.entries: dict[int, Loader] = {}
        self.own_sampler: set[int] = set()  # entries drawn by a sampler of the user's (episodes)
        # id of the Loader entry -> its loader's dataset, kept from an evaluation loader's second pass to the
        # end (the probe of `_evaldraw.py` reads a sample of it there; the user's function has often returned)
        self.datasets: dict[int, Any] = {}
        self.versions: dict[tuple[int, int], int] = {}  # (entry, pass) -> the optimizers' parameter versions then

    def on_begin(self, it: Any, loader: Any) -> None:
        p = self.ledger.follower.passes.get(it)
        if p is None:
            return
        parts = (getattr(loader, "batch_sampler", None), getattr(loader, "sampler", None),
                 getattr(getattr(loader, "batch_sampler", None), "sampler", None))
        if any(x is not None and not (type(x).__module__ or "").startswith("torch.utils.data") for x in parts):
            self.own_sampler.add(id(p.loader))
        dataset = getattr(loader, "dataset", None)
        entry = p.loader
        if dataset is not None and p.epoch.number == 1 and entry.summaries \
                and not entry.summaries[0]["trained_batches"] and len(self.datasets) < 8:
            self.datasets[id(entry)] = dataset

    def on_batch(self, it: Any, indices: Any, data: Any) -> None:
        p = self.ledger.follower.passes.get(it)
        if p is None or p.epoch.number > 1 or not p.epoch.roots or p.epoch.roots[-1] is None:
            return
        entry = p.loader
        if p.epoch.number == 1 and (not entry.summaries or entry.summaries[0]["trained_batches"]
                                    or (id(entry), 0) not in self.draws):
            return  # a training loader (or one whose first pass was not followed)
        d = self.draws.setdefault((id(entry), p.epoch.number), _Draws())
        if not d.roots:
            self.versions[(id(entry), p.epoch.number)] = self._versions()
        roots = p.epoch.roots[-1]
        if d.rows >= MOST:
            return
        t = next((t for t in batch_tensors(data) if t.dim() >= 2 and int(t.shape[0]) == roots.size), None)
        if t is None or not _values(t):
            return
        self.entries[id(entry)] = entry
        with torch.no_grad():
            d.keys.append(dense_keys(t))
            d.moments.append(moments(t))
        d.roots.append(roots)
        d.rows += roots.size


    def _versions(self) -> int:
        """The version counters of every parameter the optimizers and watched models hold, summed: unchanged between
        two moments when no update ran between them."""
        sess = self.ledger.session
        if sess is None:
            return -1
        params = {id(p): p for o in sess.optimizers for g in o.param_groups for p in g["params"]}
        for m in sess.models:
            params.update((id(p), p) for p in m.parameters())
        return sum(p._version for p in params.values()) if params else -1


def judge(ledger: DataLedger, found: Repeatable) -> list[Any]:
    pairs = [(e, found.draws[(k, 0)], found.draws[(k, 1)]) for k, e in found.entries.items()
             if (k, 1) in found.draws and not e.trains and not (k in found.own_sampler and _drawn(e))
             and not _training_samples(e, ledger.loaders)]
    if not pairs:
        return []
    flat = [k for _, a, b in pairs for k in (*a.keys, *b.keys)]
    values = torch.cat([k.reshape(-1).to("cpu") for k in flat]).numpy() if flat else np.zeros(0, np.int64)
    out = []
    at = 0
    for entry, a, b in pairs:
        first, at = _by_index(a, values, at)
        second, at = _by_index(b, values, at)
        common = first.keys() & second.keys()
        changed = sorted(i for i in common if first[i] != second[i])
        if len(common) < MIN or len(changed) < MIN or len(changed) < SHARE * len(common):
            continue
        m1, m2 = _moments_by_index(a), _moments_by_index(b)
        valued = [i for i in changed if not np.allclose(m1[i], m2[i], rtol=1e-6, atol=1e-9)]
        # Only moved: every pass measures the same values (a flip, a transpose), not other views.
        moved = len(valued) < MIN or len(valued) < SHARE * len(common)
        frame = entry.made or entry.frame
        # The harm: a split carved out of the training dataset evaluates through its transform
        # (training-distribution views, best epoch picked on noise). A dataset of its own that
        # draws at random (pairs, episodes, sampling by design) is only unusual: an info.
        carved = entry.root_token != 0 and any(e.trains and e.root_token == entry.root_token for e in ledger.loaders)
        k = id(entry)
        v0, v1 = found.versions.get((k, 0)), found.versions.get((k, 1))
        same_weights = v0 is not None and v0 >= 0 and v0 == v1
        evidence = {"samples_compared": len(common), "samples_changed": len(changed),
                    "share_changed": round(len(changed) / len(common), 4), "examples": [int(i) for i in changed[:5]],
                    "passes": [0, 1], "loader": entry.name, "dataset_shared_with_training": carved,
                    "samples_with_other_values": len(valued), "same_weights_both_passes": same_weights}
        fields = {"loader": _label(entry), "changed": len(changed), "n": len(common),
                  "share": f"{len(changed) / len(common):.0%}"}
        draw = None
        if not carved and not moved and entry.whole and valued:
            dataset = found.datasets.get(k)
            if dataset is not None and ledger.session is not None:
                draw = probe(ledger.session, dataset, int(valued[0]))
        if draw is not None and (draw.transform is not None or same_weights):
            # An evaluation dataset of its own whose transform draws, or whose two passes over unchanged
            # weights read other values: the score is a draw (the transform and the spread measured)
            evidence.update(random_in=draw.transform or "__getitem__", drawn_at=_at(draw.at),
                            applied_at=_at(draw.applied), probe_sample=int(valued[0]),
                            probe_max_difference=round(draw.difference, 6), probe_max_value=round(draw.scale, 6))
            fields.update(transform=draw.transform or "its __getitem__", applied=_short(draw.applied),
                          weights="; the same weights were evaluated in both passes" if same_weights else "")
            built = dataset_line(entry.made, entry.frame, entry.name)
            if built is not None:
                evidence["dataset_built_at"] = _at(built)
            out.append(finding("eval_inputs_random", "eval_random.transform", "warning",
                               built or draw.applied or frame, fields, evidence))
            continue
        if same_weights and not moved and not carved:
            out.append(finding("eval_inputs_random", "eval_random.same_weights", "warning", frame, fields, evidence))
            continue
        out.append(finding(
            "eval_inputs_random", "eval_random", "warning" if carved and not moved else "info", frame,
            fields, evidence))
    return out


def _drawn(entry: Loader) -> bool:
    """Its first two passes delivered other index orders (a sampler that draws: episodes); a sampler of
    the user's that replays one index list (`SubsetSampler(valid_idx)`) does not."""
    orders = [s.get("order") for s in entry.summaries[:2]]
    return len(orders) < 2 or orders[0] is None or orders[0] != orders[1]


def _at(f: Any) -> str | None:
    return f"{f.file}:{f.line}" if f is not None else None


def _short(f: Any) -> str:
    return f"{os.path.basename(f.file)}:{f.line}" if f is not None else "?"


def _values(t: torch.Tensor) -> bool:
    """A per-sample tensor of measured values: floating point, or integer pixels and samples
    (uint8 images before a later `.float() / 255`, int16 audio, any integer sample of two or more
    axes of its own); integer rows of one axis are token ids (left out: masked at random on purpose)."""
    if t.is_complex() or t.dtype == torch.bool:
        return False
    return t.is_floating_point() or t.dtype == torch.uint8 or t.dtype == torch.int16 or t.dim() >= 3


def moments(t: torch.Tensor) -> torch.Tensor:
    """Each sample's sum, sum of squares and sum of cubes (float64, on its device): the same for
    a sample whose values were only moved (flipped, transposed, rolled)."""
    x = t.detach().reshape(t.shape[0], -1).double()
    return torch.stack([x.sum(1), (x * x).sum(1), (x * x * x).sum(1)], 1)


def _moments_by_index(d: _Draws) -> dict[int, np.ndarray]:
    out: dict[int, np.ndarray] = {}
    if not d.moments:
        return out
    values = torch.cat([m.to("cpu") for m in d.moments]).numpy()
    for i, v in zip(np.concatenate(d.roots).tolist(), values):
        out.setdefault(int(i), v)
    return out


def _training_samples(entry: Loader, loaders: list[Loader]) -> bool:
    """The loader evaluates samples a training loader trained on (a train-accuracy pass over the
    augmented training data measures the training set, augmented, on purpose)."""
    seen = entry.seen
    if seen is None:
        return False
    for tr in loaders:
        t = tr.trained_on
        if tr.trains and tr.root_token == entry.root_token and t is not None and t.shape == seen.shape:
            if not (seen & ~t).any():
                return True
    return False


def _by_index(d: _Draws, values: np.ndarray, at: int) -> tuple[dict[int, int], int]:
    out: dict[int, int] = {}
    for roots, k in zip(d.roots, d.keys):
        n = int(k.numel())
        for i, v in zip(roots.tolist(), values[at:at + n].tolist()):
            out.setdefault(int(i), int(v))
        at += n
    return out, at
