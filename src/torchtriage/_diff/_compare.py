"""Two runs' step records → a `Report` (issue 28): where they part, or that they cannot be
aligned, which parameters' updates part first, and both runs' loss and gradient-norm curves.

Findings (category silent, code `diff.*`): `diff.diverged` (error: the first op where the runs
part, with both sides' lines, values and what differs), `diff.structure` (error: the programs
cannot be aligned, with the first unmatched op of each), `diff.params` (info: the parameters
whose updates part first), `diff.seeds` (info: the scripts seed differently; B ran with A's
values), `diff.init` (info: how A's initial weights were matched into B), `diff.same` (info: no
divergence over the steps compared). Series: `loss A`, `loss B`, `grad_norm A`, `grad_norm B`,
with `meta["series_pairs"]` telling the HTML page to draw each pair in one chart.
"""

from __future__ import annotations

import os
from typing import Any

from .._finding import Category, Finding, Severity, from_catalogue
from .._findings import Report
from .._frames import UserFrame
from ._align import Alignment, Difference, align, events
from ._fingerprint import describe, same_value
from ._weights import map_state

_CODES = {"op": "op", "shape": "shape", "dtype": "dtype", "value": "value", "randomness": "randomness"}


class _Side:
    def __init__(self, name: str, record: dict[str, Any]) -> None:
        self.name, self.record = name, record
        self.frames = record.get("frames", [])

    def frame(self, e: dict[str, Any] | None) -> list[Any] | None:
        if e is None or e.get("f") is None or not 0 <= e["f"] < len(self.frames):
            return None
        return self.frames[e["f"]]

    def line(self, e: dict[str, Any] | None) -> str:
        fr = self.frame(e)
        if fr is None:
            return "–"
        return f"{_short(fr[0])}:{fr[1]}    {fr[3]}".rstrip()

    def what(self, e: dict[str, Any] | None) -> str:
        if e is None:
            from .._catalogue import msg

            return msg("diff.nothing")
        if e.get("k") == "input":
            label = str(e["o"]).removesuffix("(...)")
            return f"{label}({', '.join(describe(o[0], o[1], None) for o in e['out'][:3])})"
        where = f" [{e['m']}]" if e.get("m") else ""
        return f"{_op(e)}{where}"

    def value(self, e: dict[str, Any] | None, i: int = 0) -> str:
        if e is None or not e["out"]:
            return "–"
        o = e["out"][min(i, len(e["out"]) - 1)]
        return describe(o[0], o[1], o[2])


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def _op(e: dict[str, Any]) -> str:
    return "input" if e.get("k") == "input" else str(e["o"])


def compare(ra: dict[str, Any], rb: dict[str, Any], *, names: tuple[str, str] = ("A", "B")) -> Report:
    """The report of runs A and B (their step records)."""
    a, b = _Side(names[0], ra), _Side(names[1], rb)
    found: list[Finding] = []
    aligned = align(ra, rb)
    raised = _raised(a, b, aligned.first)
    if raised is not None:
        found.append(raised)
    elif aligned.structural:
        found.append(_structure(a, b, aligned))
    elif aligned.first is not None:
        found.append(_diverged(a, b, aligned.first, aligned))
    else:
        found.append(from_catalogue(Category.SILENT, "diff.same", "diff.same", severity=Severity.INFO,
                                    fields={"ops": aligned.pairs, "steps": min(_steps(ra), _steps(rb))}))
    params = _params(ra, rb)
    if params is not None and aligned.first is not None:  # (with none: rounding that Adam amplified)
        found.append(params)
    found += _seeds(a, b) + _init(rb)
    meta = {"steps": min(_steps(ra), _steps(rb)),
            "diff": {"a": ra.get("target"), "b": rb.get("target"), "aligned": aligned.pairs,
                     "ops": [len(events(ra)), len(events(rb))], "seconds": [ra.get("seconds"), rb.get("seconds")]},
            "series_pairs": {"loss": ["loss A", "loss B"], "grad_norm": ["grad_norm A", "grad_norm B"]}}
    series = {f"{key} {side}": _curve(r, key) for key in ("loss", "grad_norm") for side, r in (("A", ra), ("B", rb))}
    return Report(tuple(found), meta=meta, series={k: v for k, v in series.items() if v})


def _uf(frame: list[Any] | None) -> UserFrame | None:
    return UserFrame(*frame) if frame else None


def _steps(r: dict[str, Any]) -> int:
    return 1 + max((e["s"] for e in r.get("ops", [])), default=-1)


def _curve(r: dict[str, Any], key: str) -> list[float | None]:
    values: dict[int, float] = {}
    for step, v in r.get(key, []):
        values.setdefault(int(step), float(v))
    if not values:
        return []
    return [values.get(i) for i in range(max(values) + 1)]


def _diverged(a: _Side, b: _Side, d: Difference, aligned: Alignment) -> Finding:
    e = d.b if d.b is not None else d.a
    assert e is not None
    step, stage = e["s"], e["g"]
    fields = {"step": step, "stage": stage, "a": a.what(d.a), "b": b.what(d.b), "op": _op(e),
              "module": e.get("m") or _msg("diff.step_code"),
              "dtype": (e["out"][d.output][1] if e["out"] else "").replace("torch.", "")}
    if d.kind in ("shape", "dtype") and d.a is not None and d.b is not None:
        oa, ob = d.a["out"][0], d.b["out"][0]
        fields.update(a=describe(oa[0], oa[1], None), b=describe(ob[0], ob[1], None))
    ev: dict[str, Any] = {"differs": d.kind, f"{a.name} line": a.line(d.a), f"{b.name} line": b.line(d.b),
                          f"{a.name} value": a.value(d.a, d.output), f"{b.name} value": b.value(d.b, d.output)}
    args_a, args_b = (d.a or {}).get("a", ""), (d.b or {}).get("a", "")
    cause_key = "diff.cause.input" if e.get("k") == "input" else "diff.cause.line"
    if d.a is not None and d.b is not None and d.a["o"] == d.b["o"] and args_a != args_b:
        ev[f"{a.name} arguments"], ev[f"{b.name} arguments"] = args_a, args_b
        cause_key = "diff.cause.args"
    end_a, end_b = d.ends
    if end_a is not None and end_b is not None and (end_a is not d.a or end_b is not d.b):
        ev[f"{a.name} result"] = f"{a.what(end_a)}: {a.value(end_a)}"
        ev[f"{b.name} result"] = f"{b.what(end_b)}: {b.value(end_b)}"
    mode = _mode(a.record, b.record, step)
    if mode:
        ev["mode"] = mode
        cause_key = "diff.cause.mode"
    if _rng(a.record, step) != _rng(b.record, step):
        ev["randomness"] = _rng_text(step)
    ev["aligned"] = f"{aligned.pairs} / {aligned.total}"
    frame = b.frame(d.b) or a.frame(d.a)
    return from_catalogue(Category.SILENT, "diff.diverged", f"diff.{_CODES[d.kind]}", fields=fields,
                          cause_key=cause_key, next_key="diff.next", evidence=ev, severity=Severity.ERROR,
                          step=step, stage=_stage(stage), module=e.get("m"), op=_op(e), frame=_uf(frame),
                          source_line=True)


def _stage(stage: str) -> str | None:
    return stage if stage in ("data", "forward", "loss", "backward", "optimizer", "parameter") else None


def _rng(r: dict[str, Any], step: int) -> str | None:
    rng = r.get("rng", [])
    return rng[step] if step < len(rng) else None


def _rng_text(step: int) -> str:
    from .._catalogue import msg

    return msg("diff.rng", step=step)


def _mode(ra: dict[str, Any], rb: dict[str, Any], step: int) -> str:
    """The modules in eval mode in one run and training mode in the other, at `step`."""
    from .._catalogue import msg

    ma = ra.get("modes", [])
    mb = rb.get("modes", [])
    if step >= len(ma) or step >= len(mb):
        return ""
    for index in ma[step]:
        if index not in mb[step]:
            continue
        ea, eb = set(ma[step][index][1]), set(mb[step][index][1])
        if ea != eb:
            only_a, only_b = sorted(ea - eb), sorted(eb - ea)
            parts = []
            label = (ra.get("models") or [])[int(index)] if int(index) < len(ra.get("models") or []) else ""
            if only_a:
                parts.append(msg("diff.mode_a", modules=_top_modules(label, only_a)))
            if only_b:
                parts.append(msg("diff.mode_b", modules=_top_modules(label, only_b)))
            return "; ".join(parts)
    return ""


def _top_modules(label: str, names: list[str]) -> str:
    """`backbone` for a whole subtree in eval mode (its root and every module below it)."""
    top = [n for n in names if not any(n != m and (m == "" or n.startswith(m + ".")) for m in names)]
    full = [".".join(p for p in (label, n) if p) or "(root)" for n in top]
    return ", ".join(full[:4]) + (f" (+{len(full) - 4})" if len(full) > 4 else "")


def _msg(key: str, **fields: Any) -> str:
    from .._catalogue import msg

    return msg(key, **fields)


def _raised(a: _Side, b: _Side, d: Difference | None) -> Finding | None:
    """One run raised where the other went on, before any other difference: that is where they
    part (a difference found at or after the step it raised in is the run stopping there)."""
    for side, other in ((b, a), (a, b)):
        info = side.record.get("raised")
        if not info or other.record.get("raised"):
            continue
        if d is not None:
            mine, theirs = (d.a, d.b) if side is a else (d.b, d.a)
            if mine is not None or theirs is None or theirs["s"] < info["step"]:
                return None  # a difference before the error, or in the ops this run did run
        frame = side.frame({"f": info.get("frame")})
        return from_catalogue(Category.SILENT, "diff.diverged", "diff.raised", severity=Severity.ERROR,
                              fields={"side": side.name, "other": other.name, "step": info["step"],
                                      "error": info["error"]},
                              evidence={"differs": "error", f"{side.name} line": side.line({"f": info.get("frame")})},
                              step=info["step"], frame=_uf(frame), source_line=True, next_key="diff.next")
    return None


def _structure(a: _Side, b: _Side, aligned: Alignment) -> Finding:
    ua, ub = aligned.unmatched
    e = ua or ub
    frame = (a.frame(ua) if ua else None) or (b.frame(ub) if ub else None)
    ev = {f"{a.name} first unmatched": f"{a.what(ua)}  {a.line(ua)}",
          f"{b.name} first unmatched": f"{b.what(ub)}  {b.line(ub)}", "aligned": f"{aligned.pairs} / {aligned.total}"}
    return from_catalogue(Category.SILENT, "diff.structure", "diff.structure", severity=Severity.ERROR,
                          fields={"pairs": aligned.pairs, "total": aligned.total, "a": a.what(ua), "b": b.what(ub)},
                          next_key="diff.structure_next", evidence=ev, step=e["s"] if e else None,
                          module=e.get("m") if e else None, op=_op(e) if e else None, frame=_uf(frame),
                          source_line=True)


def _params(ra: dict[str, Any], rb: dict[str, Any]) -> Finding | None:
    """The parameters whose updates part first (mapped by name, else by shape and order)."""
    ua, ub = ra.get("updates", []), rb.get("updates", [])
    for (step, pa), (_, pb) in zip(ua, ub):
        pairs, how = map_state(list(pa.items()), list(pb.items()))
        parted = [(x, y) for x, y in pairs if not same_value(pa[x][2], pb[y][2], pa[x][1])]
        if parted:
            names = ", ".join(x if x == y else f"{x} ↔ {y}" for x, y in parted[:6])
            more = f" (+{len(parted) - 6})" if len(parted) > 6 else ""
            return from_catalogue(Category.SILENT, "diff.params", "diff.params", severity=Severity.INFO,
                                  fields={"step": step, "names": names + more, "count": len(parted),
                                          "total": len(pairs)},
                                  evidence={"parameters": [x for x, _ in parted], "matched by": how}, step=step,
                                  parameter=parted[0][0])
    return None


def _seeds(a: _Side, b: _Side) -> list[Finding]:
    sa, sb = a.record.get("seeds", []), b.record.get("seeds", [])
    asked_a, asked_b = [s["asked"] for s in sa], [s["asked"] for s in sb]
    if asked_a == asked_b:
        return []
    used = [s["used"] for s in sb]
    fa = a.frame({"f": sa[0]["frame"]}) if sa else None
    fb = b.frame({"f": sb[0]["frame"]}) if sb else None
    key = "diff.seeds_aligned" if used[:len(asked_a)] == asked_a[:len(used)] else "diff.seeds"
    ev = {f"{a.name} seeds": asked_a, f"{b.name} seeds": asked_b, f"{b.name} ran with": used}
    return [from_catalogue(Category.SILENT, "diff.seeds", key, severity=Severity.INFO,
                           fields={"a": asked_a[:4], "b": asked_b[:4]}, evidence=ev, frame=_uf(fb or fa))]


def _init(rb: dict[str, Any]) -> list[Finding]:
    out = []
    for _index, info in sorted(rb.get("init", {}).items()):
        if info.get("how") == "name" and info.get("copied") == info.get("of"):
            continue  # the usual case: nothing to say
        out.append(from_catalogue(Category.SILENT, "diff.init", "diff.init", severity=Severity.INFO,
                                  fields={"copied": info.get("copied"), "total": info.get("of"),
                                          "how": info.get("how")},
                                  evidence={"renamed": dict(list(info.get("names", {}).items())[:8])}
                                  if info.get("names") else {}))
    return out
