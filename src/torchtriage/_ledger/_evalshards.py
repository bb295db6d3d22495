"""An evaluation sharded by hand across the ranks reaches one metric (issue 26, session 11).

`_evalsync.py` follows evaluation passes over a DistributedSampler. An evaluation set cut per rank
by hand (`rows[rank::world]`, a `shard()` generator, `idx.split(...)[rank]`) has no sampler to
say so: each rank evaluates its part, and unless a collective combines the parts, the metric that
rank 0 prints (and the checkpoint it keeps) is of its part only.

Measured per rank, on evaluation forwards (the model in `eval()`, gradients off) that no
DistributedSampler pass fed: a phase is a run of them between training forwards or backwards;
each forward's first input is digested whole (one int64, `dense_keys` on the input's device, at
most `MAX_FORWARDS` a phase, read once at the end), and the reducing collectives (the
`distributed` check's tracker) counted from the phase's start to its end. Per forward line the
first two phases are kept: an evaluation *set* comes back the same (a stream of states never
does). At the merge (rank 0) the ranks' sets are compared: disjoint sets of one line, evaluated
on every rank, with no reducing collective after rank 0's phase, are a sharded evaluation whose
metric is rank 0's part: `distributed.eval_not_reduced` (warning when rank 0's part is at most
half of the ranks' forwards, info above).
"""

from __future__ import annotations

from typing import Any

import torch

from .._distributed._env import rank_info
from .._distributed._merge import RECORD_CHECKS
from .._finding import from_catalogue
from .._frames import UserFrame, user_frame_from_stack
from .._leakage._runtime._fingerprint import dense_keys
from .._loaderstream import tensors as batch_tensors
from ._evalsync import REDUCING

MAX_FORWARDS = 4096  # forwards digested per phase
MAX_ROWS = 65_536  # input rows digested per phase
MAX_LINES = 16  # forward lines followed
SAME = 0.5  # two phases sharing this share of their rows evaluate one set (windows that shift between passes)
APART = 0.02  # ranks sharing at most this share of their rows evaluate parts of one set
META = "ledger_evalshards"


class _Phase:
    def __init__(self, frame: UserFrame | None, counts: dict[int, int]) -> None:
        self.frame = frame
        self.counts = counts
        self.keys: list[torch.Tensor] = []
        self.forwards = 0
        self.rows = 0
        self.reduced: bool | None = None


class EvalShards:
    """Listener of the ledger's root forwards and backwards (a rank of several only)."""

    def __init__(self, session: Any, ledger: Any) -> None:
        self.session = session
        self.ledger = ledger
        self.phase: _Phase | None = None
        self.kept: dict[tuple[str, int], list[_Phase]] = {}

    def _tracker(self) -> Any:
        check = self.session.checker("distributed")
        return getattr(check, "tracker", None) if check is not None else None

    def _reducing(self, tracker: Any) -> dict[int, int]:
        ops = {i for (op, _, _), i in tracker.sites.items() if op.rstrip("()") in REDUCING}
        return {i: n for i, n in tracker.counts.items() if i in ops}

    def on_forward(self, model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if model.training or (torch.is_grad_enabled() and not torch.is_inference_mode_enabled()):
            return  # (a training forward closes the phase through `training`)
        last = self.ledger.follower.last
        if last is not None and last.distributed and last.epochs and last.epochs[-1].stop is None:
            return  # a DistributedSampler pass: `_evalsync.py` follows it
        x = next((t for t in batch_tensors((args, kwargs)) if t.dim() >= 1 and t.numel() and not t.is_complex()),
                 None)
        if x is None:
            return
        p = self.phase
        if p is None:
            tracker = self._tracker()
            if tracker is None:
                return
            frame = user_frame_from_stack(2)
            key = (frame.file, frame.line) if frame is not None else ("?", 0)
            if len(self.kept.get(key, ())) >= 2 or (key not in self.kept and len(self.kept) >= MAX_LINES):
                return
            p = self.phase = _Phase(frame, self._reducing(tracker))
        p.forwards += 1
        if len(p.keys) < MAX_FORWARDS and p.rows < MAX_ROWS:
            with torch.no_grad():
                p.keys.append(dense_keys(x.detach().reshape(x.shape[0], -1)))  # one digest per input row
            p.rows += int(x.shape[0])

    def training(self) -> None:
        """A training forward or a backward: the open phase ends."""
        p = self.phase
        if p is None:
            return
        self.phase = None
        tracker = self._tracker()
        if tracker is None or not p.keys:
            return
        now = self._reducing(tracker)
        p.reduced = any(now.get(i, 0) > p.counts.get(i, 0) for i in now)
        key = (p.frame.file, p.frame.line) if p.frame is not None else ("?", 0)
        self.kept.setdefault(key, []).append(p)

    def exchange(self) -> None:
        """This rank's first evaluation set per forward line, handed in with its report."""
        self.training()  # (the run ends: the open phase's collectives are counted)
        info = rank_info()
        if info is None or info.world_size < 2 or not self.kept:
            return
        mine = {}
        for (file, line), phases in self.kept.items():
            sets = [sorted(set(torch.cat(p.keys).tolist())) for p in phases]
            first = phases[0]
            mine[f"{file}:{line}"] = {
                "keys": sets[0], "repeated": len(sets) >= 2 and _shared(sets[0], sets[1]) >= SAME,
                "forwards": first.forwards,
                "reduced": bool(first.reduced), "file": file, "line": line,
                "function": first.frame.function if first.frame is not None else ""}
        self.session.meta[META] = {"world_size": info.world_size, "lines": mine}


def _shared(a: Any, b: Any) -> float:
    """The share of the smaller of two sets of row digests that the other holds too."""
    a, b = set(a), set(b)
    return len(a & b) / max(1, min(len(a), len(b)))


def compare(records: dict[int, dict[str, Any]]) -> list[Any]:
    shards = {r: rec.get("report", {}).get("meta", {}).get(META) for r, rec in records.items()}
    shards = {r: s for r, s in shards.items() if s}
    if len(shards) < 2 or 0 not in shards or len(shards) < max(s["world_size"] for s in shards.values()):
        return []
    out = []
    for key, a in shards[0]["lines"].items():
        parts = [shards[r]["lines"].get(key) for r in sorted(shards)]
        if any(p is None or not p["repeated"] or len(p["keys"]) < 2 for p in parts) or a["reduced"]:
            continue
        sets = [set(p["keys"]) for p in parts]
        if any(_shared(sets[i], sets[j]) > APART for i in range(len(sets)) for j in range(i + 1, len(sets))):
            continue  # the ranks evaluate (some of) the same inputs: not one set cut in parts
        total = sum(p["forwards"] for p in parts)
        share = a["forwards"] / total
        frame = UserFrame(a["file"], a["line"], a["function"])
        where = f"{a['file']}:{a['line']}"
        world = len(parts)
        fields = {"where": where, "forwards": a["forwards"], "total": total, "share": f"{100 * share:.0f}",
                  "world": world}
        evidence = {"forward_at": where, "world_size": world, "forwards_per_rank": [p["forwards"] for p in parts],
                    "share_rank0": round(share, 4), "inputs_shared_between_ranks": 0,
                    "reducing_collectives_after_evaluation": 0}
        out.append(from_catalogue("distributed", "distributed.eval_not_reduced", "evalsync.hand_sharded",
                                  fields=fields, cause_key="evalsync.hand_sharded.cause",
                                  next_key="evalsync.not_reduced.next", frame=frame, evidence=evidence,
                                  severity="warning" if share <= 0.5 else "info", stage="data", rank=0))
    return out


RECORD_CHECKS.append(compare)  # the merged report of a distributed run: evaluations cut by hand across ranks
