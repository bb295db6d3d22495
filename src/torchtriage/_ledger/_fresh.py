"""A fresh iterator every step (`data.coverage_lost`, key `fresh_iter`): `next(iter(loader))`
inside the step loop.

Where every sample goes: a pass over a loader walks its sampler once, so an epoch's steps see
each sample once. A loop that builds a new iterator for each batch keeps only the first batch
of every pass: a sequential sampler gives the same first batch every step, a shuffling one
draws each batch afresh, with replacement across steps, and an epoch's worth of steps never
sees about a third of the data.

Recorded per loader (`note`, from `DataLedger.close`): the root indices of each pass that
ended after one batch of the several its sampler promised. Judged at the end (`judge`): at least
`MIN_PASSES` such passes, nearly all of the loader's passes, begun by an explicit `iter()` (a
`for` loop that breaks after its first batch is a step limit, not judged), over a sampler that
draws without replacement. The harm is measured on the indices: consecutive passes are grouped
in windows of one epoch's worth of steps (the batches a full pass gives), and the distinct
samples a window drew are compared with what a full pass gives. Warning when they are under
`COVERED` of it; `info` otherwise (a run too short for a repeat to show).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._epochs import Epoch, Loader
from ._lines import loops_at
from ._make import finding
from ._make import label as _label

MIN_PASSES = 8  # passes cut after one batch before the loop is judged
SHARE = 0.9  # of the loader's passes that delivered a batch
COVERED = 0.9  # distinct samples per epoch-sized window, of what a full pass delivers
MAX_KEPT = 4096  # passes whose indices are kept per loader


def note(entry: Loader, ep: Epoch, summary: dict[str, Any], indexed: bool) -> None:
    """Keep the samples of a pass that ended after its first batch (before `close` drops them)."""
    summary["expected"] = ep.expected
    summary["promised"] = ep.promised
    if ep.complete or ep.batches != 1 or not indexed or not ep.expected or ep.expected < 2:
        return
    kept = entry.first.setdefault("fresh", [])
    if len(kept) < MAX_KEPT and ep.roots[0] is not None:
        kept.append(np.asarray(ep.roots[0], dtype=np.int64))


def judge(entry: Loader) -> Any:
    passes = [s for s in entry.summaries if s["batches"]]
    cut = [s for s in passes if s["batches"] == 1 and not s["complete"] and (s.get("expected") or 0) >= 2]
    kept: list[np.ndarray] = entry.first.get("fresh", [])
    if len(cut) < MIN_PASSES or len(cut) < SHARE * len(passes) or len(kept) < MIN_PASSES:
        return None
    if sum(1 for s in cut if s["trained_batches"]) < MIN_PASSES:
        return None  # not a training loop's batches (an evaluation's sample batch, plotted)
    per_pass = cut[0]["expected"]
    full = cut[0].get("promised")
    if not full or entry.frame is None or loops_at(entry.frame.file, entry.frame.line):
        return None  # a sampler with replacement (or unknown), or a loop that breaks early
    windows = [kept[i:i + per_pass] for i in range(0, len(kept) - per_pass + 1, per_pass)] or [kept]
    shares, distinct, drawn = [], [], []
    for w in windows:
        rows = np.concatenate(w)
        d = int(np.unique(rows).size)
        shares.append(d / max(1, min(rows.size, full)))
        distinct.append(d)
        drawn.append(int(rows.size))
    share = float(np.mean(shares))
    harmful = share < COVERED
    shuffled = any(s["shuffled"] for s in cut)
    evidence = {
        "loader": entry.name, "loader_at": entry.where(), "passes": len(passes), "passes_of_one_batch": len(cut),
        "batches_per_full_pass": per_pass, "samples_per_full_pass": full, "windows": len(windows),
        "distinct_per_window": distinct[:8], "drawn_per_window": drawn[:8], "distinct_share": round(share, 4),
        "shuffled": shuffled,
    }
    fields = {"loader": _label(entry), "line": entry.frame.line, "passes": len(cut), "per_pass": per_pass,
              "steps": len(windows[0]), "distinct": distinct[0], "drawn": drawn[0], "full": full,
              "share": f"{100 * share:.1f}%"}
    return finding("coverage_lost", "fresh_iter", "warning" if harmful else "info", entry.frame, fields, evidence,
                   cause="fresh_iter_shuffled" if shuffled else "fresh_iter_sequential")
