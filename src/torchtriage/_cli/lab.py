"""`torchtriage lab`: the seed's four real faults (appendix G), run in memory and diagnosed by
torchtriage's own checks. Every printed value is read from a check's finding or from autograd;
a check that is not part of this build is reported as missing, never imitated."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

import torch
import torch.nn as nn

from .._catalogue import msg


@dataclasses.dataclass
class Outcome:
    what: str
    check: str
    status: str  # "found" | "nothing" | "missing" | "failed"
    line: str
    values: dict[str, Any] = dataclasses.field(default_factory=dict)
    findings: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def register(sub: Any) -> None:
    p = sub.add_parser("lab", help=msg("cli.lab.help"), description=msg("cli.lab.description"))
    p.add_argument("--json", action="store_true", help="print the outcomes as JSON instead of text")
    p.set_defaults(func=lab_command)


def _other(what: str, check: str, status: str, error: str = "") -> Outcome:
    return Outcome(what, check, status, msg(f"lab.{status}", what=what, check=check, error=error))


def broadcast() -> Outcome:
    from .. import check_loss_broadcast

    prediction = torch.tensor([[1.0], [2.0], [3.0]])
    target = torch.tensor([1.0, 2.0, 3.0])
    f = check_loss_broadcast(prediction, target).primary
    if f is None:
        return _other("broadcast", "check_loss_broadcast", "nothing")
    ev = f.evidence
    values = {"shape": tuple(ev["broadcast_shape"]), "wrong": ev["loss_computed"], "right": ev["loss_aligned"]}
    return Outcome("broadcast", "check_loss_broadcast", "found",
                   msg("lab.broadcast", code=f.code, **values), values, [f.to_dict()])


class _Scalar(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.x = nn.Parameter(torch.tensor(2.0))


def _kept_graph_gradient(model: _Scalar) -> float:
    """d(x^2)/dx at x = 2 through autograd, the graph kept."""
    model.x.grad = None
    (model.x ** 2).backward()
    assert model.x.grad is not None
    return float(model.x.grad)


def item_rebuild() -> Outcome:
    model = _Scalar()
    rebuilt = torch.tensor(model.x.item() ** 2)  # the seed's mistake: the graph is gone
    diagnose_gradients: Any  # None where this version lacks it (the lab also runs on the seed)
    try:
        from .. import diagnose_gradients
    except ImportError:
        diagnose_gradients = None
    findings: list[dict[str, Any]] = []
    if diagnose_gradients is not None:
        check = "diagnose_gradients"
        try:
            f = diagnose_gradients(model, rebuilt).primary
        except Exception as e:  # report, never fake
            return _other("item()", check, "failed", f"{type(e).__name__}: {e}")
        broken, code = f is not None, (f.code if f is not None else "-")
        if f is not None:
            findings.append(f.to_dict())
    else:
        check, code = "autograd backward", "autograd"
        try:
            rebuilt.backward()
            broken = False
        except RuntimeError:
            broken = True
    grad = _kept_graph_gradient(model)
    values = {"broken": broken, "grad": f"{grad:.1f}"}
    status = "found" if broken else "nothing"
    return Outcome("item()", check, status, msg("lab.item", code=code, **values), values, findings)


def exp_overflow() -> Outcome:
    from .. import check_exp_overflow

    f = check_exp_overflow(torch.tensor([1000.0, 1001.0])).primary
    if f is None:
        return _other("exp", "check_exp_overflow", "nothing")
    values = {"finite": f.evidence["direct_all_finite"], "total": f.evidence["stable_sum"]}
    return Outcome("exp", "check_exp_overflow", "found", msg("lab.exp", code=f.code, **values), values,
                   [f.to_dict()])


def _shared_groups(report: Any, known: set[str]) -> list[str] | None:
    """The group names a leakage finding lists in its evidence (whatever the key is called)."""
    def walk(v: Any) -> list[str] | None:
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, str) for x in v) and set(v) <= known:
            return sorted(v)
        if isinstance(v, dict):
            for x in v.values():
                r = walk(x)
                if r is not None:
                    return r
        if isinstance(v, (list, tuple)):
            for x in v:
                r = walk(x)
                if r is not None:
                    return r
        return None

    for f in report.findings:
        r = walk(dict(f.evidence))
        if r is not None:
            return r
    return None


def split_leak() -> Outcome:
    try:
        from .. import check_splits
    except ImportError:
        return _other("splits", "check_splits", "missing")
    train = [{"file": "train-0.png", "writer": "writer-a"}, {"file": "train-1.png", "writer": "writer-b"}]
    test = [{"file": "test-0.png", "writer": "writer-a"}, {"file": "test-1.png", "writer": "writer-c"}]
    try:
        report = check_splits(train, test, groups="writer")
    except Exception as e:
        return _other("splits", "check_splits", "failed", f"{type(e).__name__}: {e}")
    shared = _shared_groups(report, {"writer-a", "writer-b", "writer-c"})
    if shared is None:
        return _other("splits", "check_splits", "nothing")
    code = next((f.code for f in report.findings), "-")
    return Outcome("splits", "check_splits", "found", msg("lab.splits", code=code, shared=shared),
                   {"shared": shared}, [f.to_dict() for f in report.findings])


def run_lab() -> list[Outcome]:
    """The four experiments, in the seed's order."""
    import contextlib

    from .._session import current_session

    sess = current_session()
    with sess.paused() if sess is not None else contextlib.nullcontext():
        return [broadcast(), item_rebuild(), exp_overflow(), split_leak()]


def lab_command(args: argparse.Namespace) -> int:
    outcomes = run_lab()
    if args.json:
        print(json.dumps([dataclasses.asdict(o) for o in outcomes], indent=2, default=str))
        return 0
    print(msg("lab.title"))
    for o in outcomes:
        print("  " + o.line)
    print(msg("lab.footer", found=sum(o.status == "found" for o in outcomes)))
    return 0
