"""Ranks: each rank's samples of an epoch, compared across ranks at the end (issue 25).

Every rank hands its ledger in with its report, in the report's meta (per training loader: the
root indices of its first training epoch, a consistent sample of at most `MAX_INDICES` of them:
the indices ≡ 0 mod a power of two), through the distributed check's exchange (the run
directory, or the launcher's store across hosts); the merge on rank 0 (`_distributed._merge`)
calls `compare_records` and reports the loaders whose ranks drew the same samples. Loaders are
matched across ranks by the line that iterates them and their dataset's length. Overlap above
`OVERLAP` of an epoch is reported: a DistributedSampler pads an uneven dataset with at most
world_size - 1 repeated samples, far below it. A warning when a DDP model averages the ranks'
gradients (each step then averages copies of one batch); `info` otherwise (ranks that train
separate models replicate the data on purpose).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._distributed._env import rank_info
from .._distributed._merge import RECORD_CHECKS
from .._frames import UserFrame
from ._make import finding

if TYPE_CHECKING:
    from ._checker import DataLedger

MAX_INDICES = 1 << 12  # per loader and rank: 4096 indices, about 20 KiB of JSON in the report handed in
OVERLAP = 0.5


def _key(entry: Any) -> str:
    f = entry.frame
    return f"{f.file}:{f.line}|{entry.n}" if f else f"?|{entry.n}"


def record(ledger: DataLedger) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in ledger.loaders:
        roots = entry.first.get("roots")
        if roots is None or not entry.trains:
            continue
        rate = 1
        while roots.size // rate > MAX_INDICES:
            rate *= 2
        kept = roots[roots % rate == 0] if rate > 1 else roots
        out[_key(entry)] = {"name": entry.name, "where": entry.where(), "sampler": entry.sampler,
                            "distributed": entry.distributed, "samples": int(roots.size), "rate": rate,
                            "indices": kept.tolist(), "file": entry.frame.file if entry.frame else None,
                            "line": entry.frame.line if entry.frame else None,
                            "function": entry.frame.function if entry.frame else ""}
    return out


def _ddp(ledger: DataLedger) -> bool:
    from .._distributed._ddp import is_ddp

    session = ledger.session
    return session is not None and any(is_ddp(m) for m in session.models)


def exchange(ledger: DataLedger) -> None:
    """This rank's ledger, handed in with its report (the report's meta; the merge on rank 0
    compares the ranks' ledgers, `compare_records`, and drops them from the merged meta)."""
    info = rank_info()
    session = ledger.session
    if info is None or info.world_size < 2 or session is None:
        return
    mine = record(ledger)
    if mine:
        session.meta["ledger"] = {"ddp": _ddp(ledger), "loaders": mine}


def compare_records(records: dict[int, dict[str, Any]]) -> list[Any]:
    """The ranks' ledgers (in their reports' meta) compared: one finding per loader whose ranks
    drew the same samples of an epoch."""
    ledgers = {r: rec.get("report", {}).get("meta", {}).get("ledger") for r, rec in records.items()}
    ledgers = {r: led for r, led in ledgers.items() if led}
    if len(ledgers) < 2:
        return []
    first = min(ledgers)
    out = []
    for key, a in ledgers[first]["loaders"].items():
        for r in sorted(ledgers):
            b = ledgers[r]["loaders"].get(key) if r != first else None
            if b is None:
                continue
            ddp = any(led.get("ddp") for led in ledgers.values())
            f = compare(a, b, first, r, ddp)
            if f is not None:
                out.append(f)
                break
    return out


def compare(a: dict[str, Any], b: dict[str, Any], ra: int, rb: int, ddp: bool) -> Any:
    rate = max(a["rate"], b["rate"])
    ia, ib = np.asarray(a["indices"], dtype=np.int64), np.asarray(b["indices"], dtype=np.int64)
    if rate > 1:
        ia, ib = ia[ia % rate == 0], ib[ib % rate == 0]
    both = np.intersect1d(ia, ib)
    smaller = min(ia.size, ib.size)
    if not smaller or both.size < OVERLAP * smaller:
        return None
    count = int(both.size) * rate
    n = min(a["samples"], b["samples"])
    count = min(count, n)
    frame = UserFrame(a["file"], a["line"], a["function"]) if a.get("file") else None
    fields = {"a": ra, "b": rb, "count": count, "n": n, "share": f"{100 * count / max(n, 1):.1f}%",
              "loader": f"'{a['name']}'", "where": a["where"], "sampler": a["sampler"]}
    evidence = {"ranks": [ra, rb], "overlap": count, "epoch_samples": n, "loader": a["name"],
                "loader_at": a["where"], "sampler": a["sampler"], "ddp": ddp, "example": int(both[0]),
                "estimated": rate > 1}
    cause = "ranks_same_rank" if a["distributed"] else "ranks"
    return finding("ranks_overlap", "ranks", "warning" if ddp else "info", frame, fields, evidence, cause=cause)


RECORD_CHECKS.append(compare_records)  # the merged report of a distributed run compares the ranks' ledgers
