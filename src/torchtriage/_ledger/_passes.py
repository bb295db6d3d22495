"""Evaluation passes (issue 25): each pass over an evaluation loader sees each of its samples once.

A metric averaged over an evaluation pass is the mean over what the pass delivered. Samples
delivered twice are counted twice (a DistributedSampler pads its split to a multiple of the
world size by repeating the first samples, and a metric merged across ranks counts them), and
samples never delivered are missing (``drop_last=True`` on an evaluation loader, a
DistributedSampler with ``drop_last=True``). Both bias the metric by up to their share of the
pass: d duplicates among N samples move a mean by at most d / (N + d), l lost ones by at most
l / N.

Judged on the first complete pass (the sampler exhausted; a pass cut by a ``break`` is a quick
look, not judged) of a loader that never reaches a backward, whose samples are known by index:

* on one process: the samples its sampler should deliver (``len(sampler)``; a sampler that
  draws with replacement, or a sampler or batch sampler of the user's, is not judged) against
  the samples delivered, and the distinct ones;
* across ranks (a DistributedSampler): every rank hands its pass's root indices in with its
  report (`exchange`), and the merge compares the union with the dataset (`compare_passes`).

Severity: duplicates are a warning when they are at least `MATERIAL` of the pass (1 %: enough to
move an accuracy by a whole point, the resolution at which results are compared; padding repeats
the *first* samples, a weighting no larger split averages out); below that, `info` (a
DistributedSampler over 10 000 samples on 8 ranks pads at most 7). Lost samples are judged by
what they do to the reported number: a pass that drops a remainder (less than one batch, what
``drop_last`` does) computes the metric on the other `N - l` samples, an estimate of the same
quantity whose extra spread is sqrt(l / (N - l)) times the split's own standard error (for
samples the sampler's order does not select by value; the bound l / N is in the evidence). It
stays inside that standard error while fewer samples are lost than evaluated: `info` (a
constant small remainder, or a different one each pass with a shuffling sampler, which over
the run's passes evaluates every sample). A warning when at least half of the split never
reaches the metric (`LOST_HALF`; a split smaller than one batch is never evaluated at all).
Cost: at each evaluation pass's end, one concatenation and one `np.unique` of its indices, on
the host; in a distributed run at most `MAX_INDICES` indices per loader in the report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._distributed._env import rank_info
from .._distributed._merge import RECORD_CHECKS
from .._frames import UserFrame
from ._epochs import Epoch, Loader
from ._make import finding

if TYPE_CHECKING:
    from ._checker import DataLedger

MATERIAL = 0.01
LOST_HALF = 0.5  # lost samples: a warning when they are at least this share of the split
MAX_INDICES = 1 << 15  # per evaluation loader and rank, in the report handed in (about 200 KiB of JSON)


def note(entry: Loader, ep: Epoch, trained: list[bool]) -> None:
    """At an epoch's close: keep the first complete evaluation pass's root indices (with their
    repeats) and what its sampler promised."""
    if "eval_pass" in entry.first or not ep.complete or any(trained):
        return
    if any(r is None for r in ep.roots) or (not ep.roots and not (ep.promised and entry.n)):
        return
    # (a complete pass without a batch: a split smaller than one batch, dropped whole by drop_last)
    roots = np.concatenate([r for r in ep.roots if r is not None]) if ep.roots else np.empty(0, dtype=np.int64)
    entry.first["eval_pass"] = {"epoch": ep.number, "roots": roots, "promised": ep.promised}


def _passes_and_never(entry: Loader, promised: int) -> tuple[int, int | None]:
    """The complete evaluation passes of the run, and the samples no pass ever delivered (None:
    unknown)."""
    passes = sum(1 for s in entry.summaries if s["complete"] and not s["trained_batches"])
    if entry.seen is None:  # no batch was ever delivered (else: a pass without indices)
        never = promised if not entry.first["eval_pass"]["roots"].size else None
    else:
        never = max(0, promised - int(entry.seen.sum()))
    return passes, never


def promised(loader: Any, sampler: Any) -> int | None:
    """The samples a pass of `loader` should deliver: its sampler's length, for a sampler that
    draws without replacement (None: unknown, or drawn with replacement)."""
    from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler, SubsetRandomSampler
    from torch.utils.data.distributed import DistributedSampler

    if type(getattr(loader, "batch_sampler", None)) is not BatchSampler:
        return None  # a batch sampler of the user's (episodes, buckets): its own promise, unknown here
    if type(sampler) not in (SequentialSampler, SubsetRandomSampler, RandomSampler, DistributedSampler):
        return None  # a sampler of the user's may repeat samples by design (balanced, episodic)
    if isinstance(sampler, RandomSampler) and (sampler.replacement or sampler.num_samples != len(sampler.data_source)):
        return None
    try:
        return int(len(sampler))
    except TypeError:
        return None


def dataset_size(loader: Any) -> int:
    try:
        return int(len(loader.dataset))
    except TypeError:
        return 0


def conclude(ledger: DataLedger) -> list[Any]:
    """The one-process verdicts (the ranks' are judged at the merge)."""
    out = []
    for entry in ledger.loaders:
        p = entry.first.get("eval_pass")
        if p is None or entry.trains or entry.distributed or p["promised"] is None:
            continue
        roots = p["roots"]
        if not roots.size and (_named_for_training(entry) or not any(e.trains for e in ledger.loaders)):
            continue  # no batch at all, and nothing else trained: not known as an evaluation loader
        delivered, distinct = int(roots.size), int(np.unique(roots).size)
        dup, lost = delivered - distinct, max(0, p["promised"] - delivered)
        if dup or lost:
            example = _repeated(roots) if dup else None
            f = _finding(entry.name, entry.where(), entry.made or entry.frame, entry.sampler,
                         p["promised"] if lost else distinct, delivered, distinct, dup, lost, example, None)
            passes, never = _passes_and_never(entry, p["promised"])
            f.evidence["passes"], f.evidence["never_evaluated"] = passes, never
            if f.code == "data.eval_lost" and f.severity.value == "info" and _fixed_hole(entry, ledger, lost, never,
                                                                                      passes):
                f = _as_fixed_hole(f, entry)
            out.append(f)
    # (one line may build several loaders: the worst finding is the one kept under its key)
    return sorted(out, key=lambda f: ("error", "warning", "info").index(f.severity.value))


def _fixed_hole(entry: Loader, ledger: DataLedger, lost: int, never: int | None, passes: int) -> bool:
    """The same samples missing from every pass of a held-out loader (a sampler that does not
    shuffle: the tail in the dataset's order), at least `MATERIAL` of the split: the metric is
    computed on a set chosen by position, not on the split it names."""
    if never is None or never != lost or never < 2 or never < MATERIAL * max(entry.n, 1):
        return False
    if passes < 2 and any(s["shuffled"] for s in entry.summaries):
        return False  # one pass of a shuffled loader: a random remainder, inside the noise
    if _named_for_training(entry) or entry.seen is None:
        return False
    rows = never_rows(entry)
    if rows is None or rows.size != never or int(rows[-1] - rows[0]) + 1 != rows.size:
        return False  # scattered rows (the end of a random_split's permutation): a random remainder
    for t in ledger.loaders:  # a pass over rows that are trained on: a training metric, on purpose
        if t.trains and t.root_token == entry.root_token and t.trained_on is not None \
                and t.trained_on.shape == entry.seen.shape and bool((t.trained_on & entry.seen).any()):
            return False
    return True


def never_rows(entry: Loader) -> np.ndarray | None:
    """The root rows of the loader's dataset that no pass delivered, sorted (None: unknown)."""
    if entry.seen is None:
        return None
    members = entry.first.get("members")
    if members is None:
        return np.flatnonzero(~entry.seen) if entry.whole else None
    members = np.unique(members[(members >= 0) & (members < entry.seen.size)])
    return members[~entry.seen[members]]


def _as_fixed_hole(f: Any, entry: Loader) -> Any:
    from .._frames import user_frame_of_line
    from ._lines import keyword_line

    evidence = dict(f.evidence)
    evidence.pop("source_line", None)  # (the line is the keyword's, read below)
    rows = never_rows(entry)
    if rows is not None and rows.size:
        evidence["never_evaluated_rows"] = [int(rows[0]), int(rows[-1])]
    frame = entry.made or entry.frame
    line = keyword_line(frame.file, frame.line, "drop_last") if frame is not None else None
    fields = {k: evidence.get(k) for k in ("samples", "lost", "passes")}
    fields.update(loader=f"'{entry.name}'", where=entry.where(), kept=evidence["delivered"],
                  share=f"{100 * evidence['lost'] / max(evidence['samples'], 1):.1f}%",
                  rows=_rows(evidence.get("never_evaluated_rows")))
    if line is not None and frame is not None and line != frame.line:
        frame = user_frame_of_line(frame.file, line, frame.function)
    evidence["same_samples_every_pass"] = True
    return finding("eval_lost", "eval_lost_fixed", "warning", frame, fields, evidence)


def _rows(rows: list[int] | None) -> str:
    if not rows:
        return "?"
    return f"{rows[0]}..{rows[1]}" if rows[0] != rows[1] else str(rows[0])


def _named_for_training(entry: Loader) -> bool:
    return "train" in entry.name.lower()


def _repeated(roots: np.ndarray) -> int | None:
    values, counts = np.unique(roots, return_counts=True)
    many = values[counts > 1]
    return int(many[0]) if many.size else None


def _finding(name: str, where: str, frame: UserFrame | None, sampler: str, n: int, delivered: int, distinct: int,
             dup: int, lost: int, example: int | None, ranks: int | None) -> Any:
    bias = max(dup / max(delivered, 1), lost / max(n, 1))
    key = "eval_duplicates" if dup >= lost else "eval_lost"
    if key == "eval_duplicates":
        severity = "warning" if bias >= MATERIAL else "info"
    else:  # lost: the metric over the rest moves by more than its own standard error past half
        severity = "warning" if lost / max(n, 1) >= LOST_HALF else "info"
    fields = {"loader": f"'{name}'", "where": where, "n": n, "delivered": delivered, "distinct": distinct,
              "dup": dup, "lost": lost, "example": example if example is not None else "?",
              "bias": f"{100 * bias:.1f}", "sampler": sampler,
              "ranks": ranks or 1}
    evidence = {"loader": name, "loader_at": where, "sampler": sampler, "samples": n, "delivered": delivered,
                "distinct": distinct, "duplicated": dup, "lost": lost, "example_repeated": example,
                "ranks": ranks, "max_metric_bias": round(bias, 4)}
    cause = key + ("_ranks" if ranks else "")
    return finding(key, key, severity, frame, fields, evidence, cause=cause)


def _key(entry: Loader) -> str:
    f = entry.made or entry.frame
    return f"{f.file}:{f.line}|{entry.n}" if f else f"?|{entry.n}"


def exchange(ledger: DataLedger) -> None:
    """This rank's first complete evaluation pass per distributed evaluation loader, handed in
    with its report (meta "ledger_passes", dropped from the merged meta)."""
    info = rank_info()
    session = ledger.session
    if info is None or info.world_size < 2 or session is None:
        return
    mine = {}
    for entry in ledger.loaders:
        p = entry.first.get("eval_pass")
        if p is None or entry.trains or not entry.distributed or p["promised"] is None \
                or p["roots"].size > MAX_INDICES:
            continue
        frame = entry.made or entry.frame
        mine[_key(entry)] = {"name": entry.name, "where": entry.where(), "sampler": entry.sampler,
                             "n": entry.size, "indices": p["roots"].tolist(),
                             "file": frame.file if frame else None, "line": frame.line if frame else None,
                             "function": frame.function if frame else ""}
    if mine:
        session.meta["ledger_passes"] = {"world_size": info.world_size, "loaders": mine}


def compare_passes(records: dict[int, dict[str, Any]]) -> list[Any]:
    passes = {r: rec.get("report", {}).get("meta", {}).get("ledger_passes") for r, rec in records.items()}
    passes = {r: p for r, p in passes.items() if p}
    if len(passes) < 2:
        return []
    world = max(p["world_size"] for p in passes.values())
    if len(passes) < world:
        return []  # a rank's pass is missing: the union would count samples as lost
    out = []
    first = min(passes)
    for key, a in passes[first]["loaders"].items():
        parts = [passes[r]["loaders"].get(key) for r in sorted(passes)]
        if any(p is None for p in parts) or not a["n"]:
            continue
        roots = np.concatenate([np.asarray(p["indices"], dtype=np.int64) for p in parts])
        delivered, distinct = int(roots.size), int(np.unique(roots).size)
        dup, lost = delivered - distinct, max(0, int(a["n"]) - distinct)
        if not (dup or lost):
            continue
        frame = UserFrame(a["file"], a["line"], a["function"]) if a.get("file") else None
        out.append(_finding(a["name"], a["where"], frame, a["sampler"], int(a["n"]), delivered, distinct, dup, lost,
                            _repeated(roots) if dup else None, len(parts)))
    return out


RECORD_CHECKS.append(compare_passes)  # the merged report of a distributed run: evaluation passes across ranks
