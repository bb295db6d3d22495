"""Many ranks' records -> one `Report` (issue 15).

A record is what a rank handed in (`DistributedChecker.record`): its report as JSON, its
collective call sites in order, its parameter fingerprints, how it ended and, during a stall,
its pending collective and stack. The merged report holds each rank's findings (a finding seen
the same on several ranks once, with the ranks listed), the "received through the all-reduce"
infos completed with the rank that made the value, and the findings only a comparison of the
ranks can make: a stall with the mismatch named, collectives called in a different order,
parameters that differ at the start. Ordered by step, then rank, so that the primary finding
is the earliest anomaly across ranks.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from .._catalogue import msg
from .._findings import Category, Finding, Report, Severity
from ._branch import rank_branch


def merge(records: dict[int, dict[str, Any]], world_size: int, stall: dict[str, Any] | None = None) -> Report:
    findings: list[Finding] = []
    for r in sorted(records):
        rec = records[r]
        for d in rec.get("report", {}).get("findings", []):
            f = Finding.from_dict(d)
            if f.rank is None:
                f = f.replace(rank=r, local_rank=rec.get("local_rank"))
            findings.append(f.replace(host=rec.get("host")))
    findings = _complete_received(findings)
    findings = _dedupe(findings)
    findings = _fold_unused(findings)
    stalled = {r: rec for r, rec in records.items() if rec.get("stalled")}
    if stalled or stall:
        findings.append(_stall_finding(records, world_size, stall))
    else:
        seq = _sequence_finding(records)
        if seq is not None:
            findings.append(seq)
    diff = _fingerprint_finding(records)
    if diff is not None:
        findings.append(diff)
    findings += _ledger_findings(records)
    hosts = {rec.get("host") for rec in records.values()}
    if len(hosts) <= 1:
        findings = [f.replace(host=None) for f in findings]
    ordered = sorted(findings, key=lambda f: (f.step is None, f.step or 0,
                                              f.rank if f.rank is not None else -1, f.order))
    findings = [f.replace(order=i + 1) for i, f in enumerate(ordered)]
    return Report(tuple(findings), meta=_meta(records, world_size), series=_series(records))


def _meta(records: dict[int, dict[str, Any]], world_size: int) -> dict[str, Any]:
    first = records.get(0) or (records[min(records)] if records else {})
    meta = dict(first.get("report", {}).get("meta", {}))
    meta.pop("rank", None)
    meta.pop("ledger", None)  # the ranks' data ledgers, compared in `_ledger_findings`
    meta.pop("ledger_passes", None)  # (their evaluation passes, likewise)
    meta.pop("ledger_evalshards", None)  # (their evaluation sets cut by hand, likewise)
    meta.pop("step_ranks", None)  # the ranks' step ledgers (issue 26), likewise
    meta["world_size"] = world_size
    meta["ranks"] = {str(r): {"host": rec.get("host"), "steps": rec.get("report", {}).get("meta", {}).get("steps"),
                              "ended": (rec.get("ended") or {}).get("how"), "stalled": bool(rec.get("stalled"))}
                     for r, rec in sorted(records.items())}
    missing = [r for r in range(world_size) if r not in records]
    if missing:
        meta["ranks_missing"] = missing
    return meta


# Checks over every rank's record, registered by the checks that put data in their reports' meta
# (the data ledger's rank invariant, issue 25): the merge itself knows no check.
RECORD_CHECKS: list[Callable[[dict[int, dict[str, Any]]], list[Finding]]] = []


def _ledger_findings(records: dict[int, dict[str, Any]]) -> list[Finding]:
    return [f for check in RECORD_CHECKS for f in check(records)]


def _series(records: dict[int, dict[str, Any]]) -> dict[str, Any]:
    first = records.get(0) or (records[min(records)] if records else {})
    return dict(first.get("report", {}).get("series", {}))


def _complete_received(findings: list[Finding]) -> list[Finding]:
    out = []
    for f in findings:
        if f.code == "distributed.nonfinite_received" and f.step is not None:
            origins = sorted({g.rank for g in findings if g.rank is not None and g.rank != f.rank
                              and g.category is Category.NUMERICAL and g.severity is not Severity.INFO
                              and g.step is not None and g.step <= f.step})
            if origins:
                o = origins[0]
                f = f.replace(message=msg("dist.received_from", origin=o, step=f.step),
                              next_check=msg("dist.next.received", origin=o),
                              evidence={**f.evidence, "origin rank": o})
        out.append(f)
    return out


def _dedupe(findings: list[Finding]) -> list[Finding]:
    """The same finding on several ranks (an unused parameter in a replicated model) once,
    kept as the lowest rank's with the ranks listed."""
    seen: dict[tuple[Any, ...], int] = {}
    out: list[Finding] = []
    ranks: dict[int, list[int]] = {}
    for f in findings:
        key = (*f.key, f.step, f.message)
        at = seen.get(key)
        if at is None:
            seen[key] = len(out)
            ranks[len(out)] = [f.rank] if f.rank is not None else []
            out.append(f)
        elif f.rank is not None:
            ranks[at].append(f.rank)
    for i, rs in ranks.items():
        if len(rs) > 1:
            out[i] = out[i].replace(evidence={**out[i].evidence, "ranks": rs})
    return out


def _fold_unused(findings: list[Finding]) -> list[Finding]:
    """DDP's "Expected to have finished reduction" explained by the exception triage (with the
    branch of forward) and the unused parameters seen at the backward before it: one finding,
    the triage's, with this check's evidence (names, modules, ranks) added."""
    theirs = [i for i, f in enumerate(findings) if f.code == "gradient.ddp_unused_parameters"]
    mine = [f for f in findings if f.code == "distributed.unused_parameters"]
    if not theirs or not mine:
        return findings
    first = mine[0]
    extra = {"unused parameters": first.evidence.get("unused parameters"),
             "modules": first.evidence.get("modules"), "seen at the backward of step": first.step,
             "ranks": sorted({r for f in mine for r in (f.evidence.get("ranks") or [f.rank]) if r is not None})}
    at = theirs[0]
    findings[at] = findings[at].replace(evidence={**findings[at].evidence, **extra})
    return [f for f in findings if f.code != "distributed.unused_parameters"]


def _short(path: str | None) -> str:
    if not path:
        return "?"
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else os.path.basename(path)


def _op(op: str) -> str:
    if op in ("backward", "ddp_forward"):
        return msg("dist.op.backward" if op == "backward" else "dist.op.forward")
    return op


def frozen_record(rank: int, heartbeat: dict[str, Any], stack: list[str]) -> dict[str, Any]:
    """The record of a rank whose interpreter is blocked: its last heartbeat and the stack
    faulthandler wrote (innermost first)."""
    return {"rank": rank, "host": heartbeat.get("host"), "frozen": True, "stalled": True,
            "fh_stack": stack, "pending": heartbeat.get("pending"), "report": {}}


def _fh_where(stack: list[str]) -> tuple[str, str]:
    """(function, user's line) from faulthandler lines 'File "f", line N in fn', innermost first."""
    from .._frames import is_user_file

    parsed = []
    for line in stack:
        try:
            path = line.split('"')[1]
            rest = line.split('"')[2]  # ', line N in fn'
            lineno = int(rest.split("line")[1].split()[0])
            fn = rest.rsplit(" in ", 1)[1].strip()
        except (IndexError, ValueError):
            continue
        parsed.append((path, lineno, fn))
    func = next((fn for p, _, fn in parsed), "?")
    user = next(((p, n) for p, n, _ in parsed if is_user_file(p)), None)
    return func, (f"{_short(user[0])}:{user[1]}" if user else "?")


def _describe(rank: int, rec: dict[str, Any] | None) -> tuple[str, tuple[str, str] | None]:
    """One clause per rank, and (op, where) when it waits in a collective."""
    if rec is None:
        return msg("dist.missing", rank=rank), None
    if rec.get("frozen"):
        func, where = _fh_where(rec.get("fh_stack") or [])
        return msg("dist.frozen", rank=rank, function=func, where=where), (f"{func}()", where)
    ended = rec.get("ended") or {}
    if not rec.get("stalled"):
        how = (msg("dist.ended_error", error=ended.get("error", "")) if ended.get("how") == "error"
               else msg("dist.ended_ok"))
        return msg("dist.ended", rank=rank, how=how), None
    p = rec.get("pending")
    if p:
        where = f"{_short(p.get('file'))}:{p.get('line')}"
        return msg("dist.wait", rank=rank, op=_op(p["op"]), where=where), (p["op"], where)
    u = rec.get("user_frame") or {}
    return msg("dist.runs", rank=rank, where=f"{_short(u.get('file'))}:{u.get('line')}"), None


def _stall_finding(records: dict[int, dict[str, Any]], world_size: int, stall: dict[str, Any] | None) -> Finding:
    clauses, waits = [], {}
    for r in range(world_size):
        text, w = _describe(r, records.get(r))
        clauses.append(text)
        if w is not None:
            waits[r] = w
    seconds = float((stall or {}).get("seconds") or 0.0)
    if not seconds:
        now = max((rec.get("time") or 0.0) for rec in records.values()) if records else 0.0
        since = [rec["pending"]["since"] for rec in records.values() if rec.get("pending")]
        seconds = now - min(since) if since and now else 0.0
    same = len(waits) == world_size and len(set(waits.values())) == 1
    if same:
        op, where = next(iter(waits.values()))
        summary = msg("dist.stall_same", op=_op(op), where=where)
    else:
        # the waiting ranks first, lowest rank first: "rank 1 waits in barrier() at train.py:42; ..."
        order = sorted(range(world_size), key=lambda r: (r not in waits, r))
        summary = "; ".join(clauses[r] for r in order)
    in_collective = [r for r in waits if (records.get(r) or {}).get("pending") and not records[r].get("frozen")]
    first = min(in_collective) if in_collective else (min(waits) if waits else None)
    rec = records.get(first) if first is not None else None
    p = (rec or {}).get("pending") or {}
    evidence: dict[str, Any] = {}
    for r in range(world_size):
        evidence[f"rank {r}"] = clauses[r]
    for r in sorted(records):
        stack = records[r].get("stack") or records[r].get("fh_stack")
        if stack and records[r].get("stalled"):
            evidence[f"rank {r} stack"] = stack
    cause = msg("dist.cause.stall_same" if same else "dist.cause.stall")
    if not same:
        sites = [((records[r].get("pending") or {}).get("file"), (records[r].get("pending") or {}).get("line"))
                 for r in sorted(in_collective)]
        cause += _branches(sites, evidence)
    return Finding(Category.DISTRIBUTED, "distributed.stall", msg("dist.stall", seconds=seconds, summary=summary),
                   severity=Severity.ERROR, step=p.get("step"), file=p.get("file"), line=p.get("line"),
                   rank=first, cause=cause, next_check=msg("dist.next.stall"), evidence=evidence)


def _branches(sites: list[tuple[str | None, int | None]], evidence: dict[str, Any]) -> str:
    """The `if` on the rank around the collectives the ranks disagree on: a sentence for the
    cause (and the evidence entry), or "" when none is found."""
    found = list(dict.fromkeys(b for b in (rank_branch(f, n) for f, n in sites) if b))
    if not found:
        return ""
    evidence["rank-dependent branch"] = found
    return msg("dist.cause.rank_branch", branch="; ".join(found))


def _sites(rec: dict[str, Any]) -> list[tuple[str, str, int]]:
    c = rec.get("collectives") or {}
    sites = {int(k): tuple(v) for k, v in (c.get("sites") or {}).items()}
    return [sites[i] for i in c.get("sequence", []) if i in sites]


def _site_text(site: tuple[str, str, int] | None) -> str:
    if site is None:
        return "—"
    op, f, line = site
    return f"{_op(op)} at {_short(f)}:{line}"


def _sequence_finding(records: dict[int, dict[str, Any]]) -> Finding | None:
    if len(records) < 2:
        return None
    seqs = {r: _sites(rec) for r, rec in records.items()}
    ranks = sorted(seqs)
    base = seqs[ranks[0]]
    for r in ranks[1:]:
        other = seqs[r]
        n = min(len(base), len(other))
        idx = next((i for i in range(n) if base[i] != other[i]), None)
        if idx is None and len(base) != len(other):
            total = [(records[x].get("collectives") or {}).get("total", len(seqs[x])) for x in (ranks[0], r)]
            if total[0] == total[1]:
                continue
            idx = n
        if idx is None:
            continue
        a = base[idx] if idx < len(base) else None
        b = other[idx] if idx < len(other) else None
        site = a or b
        assert site is not None
        evidence: dict[str, Any] = {f"rank {ranks[0]} calls": len(base), f"rank {r} calls": len(other)}
        cause = msg("dist.cause.sequence") + _branches([(x[1], x[2]) for x in (a, b) if x is not None], evidence)
        return Finding(Category.DISTRIBUTED, "distributed.rank_dependent_collectives",
                       msg("dist.sequence", index=idx + 1, first=_site_text(a), rank_a=ranks[0],
                           second=_site_text(b), rank_b=r),
                       severity=Severity.ERROR, file=site[1] or None, line=site[2] or None,
                       cause=cause, next_check=msg("dist.next.sequence"), evidence=evidence)
    return None


def _fingerprint_finding(records: dict[int, dict[str, Any]]) -> Finding | None:
    prints = {r: rec.get("fingerprints") or {} for r, rec in records.items()}
    if len(prints) < 2:
        return None
    ranks = sorted(prints)
    base = prints[ranks[0]]
    differ = []
    for name, v in base.items():
        for r in ranks[1:]:
            w = prints[r].get(name)
            if w is None:
                continue
            if not math.isclose(v, w, rel_tol=1e-9, abs_tol=1e-12) and not (v != v and w != w):
                differ.append(name)
                break
    if not differ:
        return None
    shown = ", ".join(differ[:8]) + (f", ... (+{len(differ) - 8})" if len(differ) > 8 else "")
    return Finding(Category.DISTRIBUTED, "distributed.params_differ",
                   msg("dist.params_differ", count=len(differ), names=shown), severity=Severity.ERROR, step=0,
                   parameter=differ[0] if len(differ) == 1 else None,
                   cause=msg("dist.cause.params_differ"), next_check=msg("dist.next.params_differ"),
                   evidence={"differ": differ[:50], "ranks compared": ranks})
