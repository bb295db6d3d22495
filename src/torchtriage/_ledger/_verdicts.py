"""The invariants a correct program keeps, judged from the ledger at the end.

* coverage: a training epoch's backward passes see what the sampler delivered. A complete epoch
  (the sampler exhausted) whose batches partly never reached a backward lost coverage. Warning
  when the lost samples are at least `LOST_SHARE` of the epochs' samples and more than one batch
  per epoch: a final partial batch left out is what ``drop_last=True`` does, and a few skipped
  batches (a non-finite loss skipped) are 1-2 % of an epoch of a hundred batches; below that,
  `info`. An epoch cut short by a ``break`` or a step limit is not judged (the run stopped);
* order: a shuffling sampler's complete training epochs deliver different orders; two equal
  orders are a warning (a DistributedSampler whose ``set_epoch`` is never called, a generator
  re-seeded each epoch);
* splits: samples a loader only evaluated on (no batch of it ever reached a backward) that a
  training loader trained on, by index into the same root dataset or by content digest: an
  error. An evaluation loader over exactly the training samples (train accuracy), or named
  after the training data, measures the training set on purpose: not reported, unless the
  user's name makes it a validation or test loader over a dataset object of its own (a "val"
  dataset built from the training data: ``constructor(train=True)`` twice), an error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._frames import user_frame_of_line
from ._epochs import Loader
from ._epochwrap import class_line
from ._lines import skips
from ._make import finding
from ._make import label as _label
from ._roles import role
from ._windows import by_windows

if TYPE_CHECKING:
    from ._checker import DataLedger

LOST_SHARE = 0.05
# Samplers that draw from the whole dataset: a loader with one of them is split by its dataset,
# not by its sampler (SubsetRandomSampler, a custom sampler over an index list: split by sampler).
WHOLE_SAMPLERS = frozenset({"RandomSampler", "SequentialSampler", "DistributedSampler", "WeightedRandomSampler"})
SPLIT_SHARE = 0.01  # content matches below this share of the evaluation samples: natural duplicates (info)
DISTINCT = 0.9  # a loader whose rows are less distinct than this holds natural duplicates (content unusable)


def conclude(ledger: DataLedger) -> None:
    session = ledger.session
    if session is None:
        return
    from ._fresh import judge as fresh
    from ._weights import judge as sampler_weights

    for entry in ledger.loaders:
        for f in (coverage(entry) or fresh(entry), order(entry), sampler_weights(entry)):
            if f is not None:
                session.add(f)
    already = any(f.code == "data.heldout_trained" for f in session.findings)
    if not already:
        from ._roles import judge as roles

        found = roles(ledger, ledger.follower.samplers)  # the held-out loader given the training rows
        found = found or splits(ledger.loaders, ledger.follower)
        for f in found:
            session.add(f)
        if not found:
            from ._evalnames import judge as eval_names

            for f in eval_names(ledger.follower.names, ledger.loaders):
                session.add(f)
    from ._groups import verdicts

    for f in verdicts(ledger.loaders):
        session.add(f)




def coverage(entry: Loader) -> Any:
    epochs = [s for s in entry.summaries if s["complete"] and s["trained_batches"] and s["batches"]]
    if not epochs:
        return None
    lost_epochs = [s for s in epochs if s["lost_samples"]]
    if not lost_epochs:
        return None
    samples = sum(s["samples"] for s in epochs)
    lost = sum(s["lost_samples"] for s in epochs)
    share = lost / max(samples, 1)
    per_epoch = lost / len(epochs)
    largest = max(s["largest_batch"] for s in epochs)
    harmful = share >= LOST_SHARE and per_epoch > largest
    found = [s for s in skips(entry.frame.file, entry.frame.line) if s.kind == "continue"] if entry.frame else []
    if not harmful and not found:
        return None  # a small loss with no line that skips: nothing to act on (batches kept in a list)
    frame = entry.frame
    if found and entry.frame is not None:
        frame = user_frame_of_line(entry.frame.file, found[0].line, entry.frame.function)
    first = lost_epochs[0]
    evidence = {
        "loader": entry.name, "loader_at": entry.where(), "epochs": len(epochs), "samples": samples,
        "lost_samples": lost, "share": round(share, 4), "lost_batches_first_epoch": first["lost_batches"],
        "batches_per_epoch": first["batches"], "example_indices": first["lost_examples"],
        "skips": [f"{s.kind} at line {s.line}: {s.source}" for s in found],
    }
    fields = {"loader": _label(entry), "lost": lost, "samples": samples, "share": f"{100 * share:.1f}%",
              "epochs": len(epochs), "batches": first["lost_count"], "per_epoch": first["batches"],
              "skip": found[0].source if found else "?"}
    return finding("coverage_lost", "coverage", "warning" if harmful else "info", frame, fields, evidence,
                   cause="coverage" if found else "coverage_unknown")


def order(entry: Loader) -> Any:
    epochs = [s for s in entry.summaries if s["complete"] and s["trained_batches"] and s["shuffled"]
              and s["order"] is not None and s["samples"] >= 16]
    if not epochs:
        return _order_wrapped(entry)
    seen: dict[str, int] = {}
    repeated: list[int] = []
    for s in epochs:
        if s["order"] in seen:
            repeated.append(s["epoch"])
        else:
            seen[s["order"]] = s["epoch"]
    if not repeated:
        return None
    frame = entry.made or entry.frame
    set_epoch = entry.distributed
    stuck = {s["sampler_epoch"] for s in epochs}
    evidence = {"loader": entry.name, "loop": f"{entry.frame.file}:{entry.frame.line}" if entry.frame else "?",
                "sampler": entry.sampler, "epochs_compared": len(epochs), "epochs_repeated": repeated[:20],
                "samples_per_epoch": epochs[0]["samples"]}
    if set_epoch:
        evidence["sampler_epoch"] = sorted(x for x in stuck if x is not None)
    fields = {"loader": _label(entry), "where": entry.where(), "epochs": ", ".join(map(str, repeated[:8])),
              "compared": len(epochs), "sampler": entry.sampler,
              "epoch": next(iter(stuck)) if len(stuck) == 1 else "?"}
    return finding("order_repeated", "order", "warning", frame, fields, evidence,
                   cause="order_set_epoch" if set_epoch and len(stuck) == 1 else "order")


def _order_wrapped(entry: Loader) -> Any:
    """The same order every epoch because `set_epoch` reached the loader's sampler but not the
    shuffling sampler it wraps (`_epochwrap`): the outer epoch changed, an inner one did not."""
    epochs = [s for s in entry.summaries if s["complete"] and s["trained_batches"] and s.get("inner_epochs")
              and s["order"] is not None and s["samples"] >= 16]
    if len(epochs) < 2 or len({s["order"] for s in epochs}) > 1:
        return None  # (every compared epoch in one order: a partial repeat is another story)
    outer = [s["outer_epoch"] for s in epochs]
    if len(set(outer)) < 2:
        return None  # set_epoch never called at all: nothing says the order should change
    inner = epochs[0]["inner_epochs"]
    stuck = [(name, ep) for i, (name, ep) in enumerate(inner)
             if all(len(s["inner_epochs"]) == len(inner) and s["inner_epochs"][i] == (name, ep) for s in epochs)]
    if not stuck:
        return None
    cls = epochs[0]["sampler_cls"]
    wrapper = cls.__name__ if cls is not None else entry.sampler
    frame = (class_line(cls) if cls is not None else None) or entry.made or entry.frame
    repeated = [s["epoch"] for s in epochs[1:]]
    evidence = {"loader": entry.name, "loop": f"{entry.frame.file}:{entry.frame.line}" if entry.frame else "?",
                "loader_at": entry.where(), "sampler": wrapper, "sampler_epochs": outer[:20],
                "wrapped_sampler": stuck[0][0], "wrapped_sampler_epoch": stuck[0][1],
                "epochs_compared": len(epochs), "epochs_repeated": repeated[:20],
                "samples_per_epoch": epochs[0]["samples"]}
    fields = {"loader": _label(entry), "where": entry.where(), "epochs": ", ".join(map(str, repeated[:8])),
              "compared": len(epochs), "sampler": wrapper, "outer": ", ".join(map(str, outer[:8])),
              "inner": stuck[0][0], "epoch": stuck[0][1]}
    return finding("order_repeated", "order_wrapped", "warning", frame, fields, evidence)


def _named_for_training(entry: Loader) -> bool:
    return "train" in entry.name.lower()


def splits(loaders: list[Loader], follower: Any = None) -> list[Any]:
    train = [e for e in loaders if e.trains]
    held = [e for e in loaders if not e.trains and e.summaries and any(s["samples"] for s in e.summaries)]
    out: list[Any] = []
    for e in held:
        if _named_for_training(e):
            continue
        for t in train:
            if e.models and t.models and not e.models & t.models:
                continue  # another model evaluates (k-fold: each fold's model on its own fold)
            if e.root_token and e.root_token == t.root_token and _pass_over_everything(e, t):
                continue
            f = _by_index(e, t) if e.root_token and e.root_token == t.root_token else _by_content(e, t)
            if f is None:
                f = _by_windows(e, t)
            if f is not None:
                out.append(f)
                break
    out += _eval_pairs(held)
    if not out and follower is not None:
        out += _unloaded(follower, train)
    return out


def _unloaded(follower: Any, train: list[Loader]) -> list[Any]:
    """Held-out datasets no loader iterated (scored by hand), against the training loaders."""
    if not any(t.slices for t in train):
        return []
    for e in follower.unloaded.candidates():
        for t in train:
            f = _by_windows(e, t, "window_unloaded")
            if f is not None:
                return [f]
    return []


def _eval_pairs(held: list[Loader]) -> list[Any]:
    """A validation loader and a test loader (by the user's names) over the same samples: the
    model is selected on its test set."""
    val = [e for e in held if role(e) == "validation"]
    test = [e for e in held if role(e) == "test"]
    for v in val:
        for t in test:
            if v.root_token and v.root_token == t.root_token:
                if v.seen is None or t.seen is None or v.n != t.n:
                    continue
                both = v.seen & t.seen
                count, how = int(both.sum()), "index"
                example = int(np.flatnonzero(both)[0]) if count else 0
            else:
                vk, tk = _keys(v), _keys(t)
                if vk is None or tk is None or v.row_shape != t.row_shape or v.ragged or t.ragged:
                    continue
                vk, tk = vk.cpu(), tk.cpu()
                vu = torch.unique(vk)
                if vu.numel() < DISTINCT * vk.numel() or torch.unique(tk).numel() < DISTINCT * tk.numel():
                    continue  # rows repeat inside a split (one field per entity): equal content is no shared sample
                hit = torch.isin(tk, vu)
                count, how = int(hit.sum()), "content"
                example = int(torch.nonzero(hit)[0, 0]) if count else 0
            n = int(t.seen.sum()) if how == "index" and t.seen is not None else t.kept
            if count >= 2 and count >= 0.5 * n:
                fields = {"val": _label(v), "val_where": v.where(), "test": _label(t), "test_where": t.where(),
                          "count": count, "n": n, "share": f"{100 * count / max(n, 1):.1f}%", "how": how}
                evidence = {"validation_loader": v.name, "validation_at": v.where(), "test_loader": t.name,
                            "test_at": t.where(), "count": count, "test_samples": n, "example": example,
                            "matched": how}
                return [finding("split_overlap", "val_test", "warning", t.made or t.frame, fields, evidence)]
    return []


def _split_finding(e: Loader, t: Loader, count: int, n: int, example: int, how: str, severity: str,
                   key: str = "split") -> Any:
    fields = {"eval": _label(e), "eval_where": e.where(), "train": _label(t), "train_where": t.where(),
              "count": count, "n": n, "share": f"{100 * count / max(n, 1):.1f}%", "example": example, "how": how}
    evidence = {"evaluation_loader": e.name, "evaluation_at": e.where(), "training_loader": t.name,
                "training_at": t.where(), "count": count, "evaluation_samples": n, "example": example, "matched": how}
    if key != "split":
        evidence["role"] = role(e)
    return finding("split_overlap", key, severity, e.made or e.frame, fields, evidence)


def _by_index(e: Loader, t: Loader) -> Any:
    if e.seen is None or t.trained_on is None or e.n != t.n:
        return None
    if e.whole and t.whole and t.sampler in WHOLE_SAMPLERS:
        return None  # one dataset object, trained on and evaluated: no split between them
    if not t.whole and t.chain and t.chain[0] in e.chain:
        return None  # a piece of the training part itself (a Subset of it), measured on purpose
    both = e.seen & t.trained_on
    count = int(both.sum())
    if not count:
        return None
    n = int(e.seen.sum())
    if n == int(t.trained_on.sum()) == count:
        return None  # the training samples themselves, measured (train accuracy)
    return _split_finding(e, t, count, n, int(np.flatnonzero(both)[0]), "index", "error")


def _pass_over_everything(e: Loader, t: Loader) -> bool:
    """One pass over the whole dataset the training part was cut from, by a loader not named for
    an evaluation (`full_loader`): every sample's features, embeddings or predictions, the
    training part included by design, not a held-out set (that one is evaluated each epoch, or
    named so)."""
    return e.whole and not t.whole and len(e.summaries) < 2 and role(e) is None \
        and "eval" not in e.name.lower()


def _by_windows(e: Loader, t: Loader, key: str = "window_split") -> Any:
    """Samples of disjoint splits that share most of their time steps (`_windows.py`)."""
    if e.root_token and e.root_token == t.root_token:
        if e.whole and t.whole:
            return None  # one dataset object, trained on and evaluated: no split between them
        if not t.whole and t.chain and t.chain[0] in e.chain:
            return None  # a piece of the training part itself, measured on purpose
    found = by_windows(e, t)
    if found is None:
        return None
    fields = {"eval": _label(e), "eval_where": e.where(), "train": _label(t), "train_where": t.where(),
              "count": found["count"], "n": found["n"], "share": f"{100 * found['count'] / max(found['n'], 1):.1f}%",
              "example": found["example"], "axis": found["axis"]}
    evidence = {"evaluation_loader": e.name, "evaluation_at": e.where(), "training_loader": t.name,
                "training_at": t.where(), "count": found["count"], "evaluation_samples": found["n"],
                "example": found["example"], "matched": "overlapping windows", "axis": found["axis"],
                "positions": found["positions"], "slices_shared": found["slices_shared"],
                "repeat_rate_across_evaluation": found["repeat_rate_across_evaluation"]}
    if found.get("run", 1) > 1:
        evidence["consecutive_slices"] = found["run"]
    if key != "window_split":
        evidence["iterated_by_a_loader"] = False
    return finding("split_overlap", key, "error", e.made or e.frame, fields, evidence,
                   cause="window_split")


def _keys(entry: Loader) -> torch.Tensor | None:
    if not entry.keys:
        return None
    if len(entry.keys) > 1:
        entry.keys = [torch.cat([k.to(entry.keys[0].device) for k in entry.keys])]
    return entry.keys[0]


def _by_content(e: Loader, t: Loader) -> Any:
    if e.row_shape is None or e.row_shape != t.row_shape or e.ragged or t.ragged:
        return None
    ek, tk = _keys(e), _keys(t)
    if ek is None or tk is None:
        return None
    ek, tk = ek.cpu(), tk.cpu()  # the one read of the digests, at the end
    tu, eu = torch.unique(tk), torch.unique(ek)
    if tu.numel() < DISTINCT * tk.numel() or eu.numel() < DISTINCT * ek.numel():
        return None  # rows repeat inside a split: equal content is no evidence of a shared sample
    hit = torch.isin(ek, tu)
    count = int(hit.sum())
    if not count:
        return None
    n = int(ek.numel())
    if eu.numel() == tu.numel() == int(torch.isin(eu, tu).sum()):
        if role(e) is None or count < 2:
            return None  # the training samples themselves, measured (train accuracy)
        # A loader named for validation or test over a second dataset object that holds exactly
        # the training samples: the held-out dataset was built from the training data.
        return _split_finding(e, t, count, n, int(torch.nonzero(hit)[0, 0]), "content", "error",
                              key="split_same")
    # Rows that repeat inside the training loader repeat across splits as often by chance: the
    # share must stand well above the training rows' own repeat rate.
    repeats = 1.0 - tu.numel() / max(tk.numel(), 1)
    severity = "error" if count >= 2 and count >= max(SPLIT_SHARE, 3 * repeats) * n else "info"
    return _split_finding(e, t, count, n, int(torch.nonzero(hit)[0, 0]), "content", severity)
