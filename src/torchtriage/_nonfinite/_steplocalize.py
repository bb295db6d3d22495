"""Localizing a non-finite value by replaying the whole recorded step (issue 11).

The model-level localizers (`_localize.py`) replay the step's first model call and the
`torch.nn.functional` loss; they cannot see a hand-written loss, a metric, a second model call
or functional code. When the step was taped (`StepRecord.taped`), these replay the step as it
ran (`_stepreplay.replay_step`):

    forward   the first root call whose replayed output is bad → the producer op (op tracer)
    loss      the replayed backward root → the producer op, in a model or in the tape, with the
              user's line of the recorded op
    backward  `torch.autograd.grad` of each replayed backward call with a hook on every node:
              the first node with finite incoming and non-finite outgoing gradients; its tape op
              (through the replayed output's `grad_fn`) or its module (forward metadata)

Each finding says `localized_by` ("step_replay"). A record that cannot be replayed gives None
and the reason; the caller then falls back to the model-level localizers.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from .._catalogue import msg
from .._findings import Finding, Stage
from .._summary import summarize
from ._families import kind_of, kind_text
from ._replay import (
    FirstNonFiniteNode,
    NodeMap,
    float_leaves,
    graph_nodes,
    node_evidence,
    node_frame,
    node_op,
    replaying,
)
from ._stepreplay import NotReplayable, Replayed, replay_step, usable
from ._trace import ModuleStack, OpTracer, nonfinite

BY = "step_replay"


def _models(record: Any) -> list[Any]:
    seen: dict[int, Any] = {}
    for c in record.calls:
        seen.setdefault(id(c.model), c.model)
    return list(seen.values())


def _traced_replay(session: Any, state: Any, namer: Any) -> tuple[OpTracer, Replayed] | None:
    """The recorded step replayed under the op tracer (None: it cannot be replayed). The
    tracer's user lines stop at the caller's frame."""
    snap = session.snapshot
    mods = ModuleStack(namer)
    tracer = OpTracer(mods, session.param_index.names())
    tracer.stop_frame = sys._getframe(1)
    try:
        with replaying(session, snap, _models(snap.record), state.autocast), mods, tracer:
            return tracer, replay_step(snap.record, tracer=tracer)
    except NotReplayable:
        return None


def _by(record: Any, **more: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {"localized_by": BY, "replayed": (
        f"{len(record.calls)} model call(s), {sum(1 for o in record.ops if not o.before_step)} op(s)")}
    ev.update(_batch(record))
    ev.update({k: v for k, v in more.items() if v is not None})
    return ev


def _batch(record: Any) -> dict[str, Any]:
    """The step's batch as its first model call received it: shapes, dtypes, min / max and
    non-finite counts of up to two tensors (on the report path only)."""
    if not record.calls:
        return {}
    call = record.calls[0]
    leaves = [t for t in tree_leaves((call.args, call.kwargs)) if isinstance(t, torch.Tensor)][:2]
    return {msg("nonfinite.ev.batch", model=call.label, index=i): summarize(t) for i, t in enumerate(leaves)}


def _with_by(f: Finding, record: Any, **more: Any) -> Finding:
    return f.replace(evidence=dict(f.evidence, **_by(record, **more)))


def guarded(fn: Any) -> Any:
    """A whole-step replay that fails (an op that cannot run twice, a custom object in the
    arguments) gives None: the caller falls back to the model-level localizers."""
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception:
            return None
    run.__name__ = fn.__name__
    run.__wrapped__ = fn  # type: ignore[attr-defined]
    return run


def why_not(session: Any) -> str | None:
    snap = session.snapshot
    return usable(snap.record if snap is not None else None)


@guarded
def forward(session: Any, state: Any, step: int, namer: Any,
            any_kind: bool) -> tuple[OpTracer, torch.Tensor, Any, dict[str, Any]] | None:
    """Replay the step; the first root call whose replayed output is non-finite (the caller
    reads the producer off the tracer)."""
    replayed = _traced_replay(session, state, namer)
    if replayed is None:
        return None
    tracer, rep = replayed
    for call, out in rep.calls:
        bad = [t for t in float_leaves(out) if nonfinite(t, any_kind)]
        if bad:
            return tracer, bad[0], call, _by(session.snapshot.record)
    return None


@guarded
def loss(session: Any, state: Any, step: int, namer: Any, producer: Any) -> Finding | None:
    """The loss (a backward root) is non-finite: the op that first made a value reaching it."""
    replayed = _traced_replay(session, state, namer)
    if replayed is None:
        return None
    tracer, rep = replayed
    record = session.snapshot.record
    for bw, roots, _ in rep.backwards:
        for r in roots:
            if not isinstance(r, torch.Tensor) or not nonfinite(r.detach()):
                continue
            origin = tracer.producer_of(r)
            if origin is None:
                return None
            f = producer(origin, Stage.LOSS, step, loss=True, frame=bw.frame, loss_value=state.loss_value)
            return _with_by(f, record, **{"backward called at": _where(bw.frame)})
    return None


def _where(frame: Any) -> str | None:
    return f"{frame.file}:{frame.line}" if frame is not None else None


@guarded
def backward(session: Any, state: Any, step: int, namer: Any, make: Any) -> Finding | None:
    """The first backward node that turns finite incoming gradients into non-finite ones."""
    snap = session.snapshot
    record = snap.record
    mods = ModuleStack(namer)
    watch = FirstNonFiniteNode()
    first = watch.first

    rep: Replayed | None = None
    with replaying(session, snap, _models(record), state.autocast), \
            torch.autograd.set_detect_anomaly(True, check_nan=False), mods:
        nm = NodeMap(mods)
        try:
            calls: dict[Any, Any] = {}

            def on_call(call: Any) -> None:
                nm.tag = call.label if call is not None else None
                if call is not None:
                    calls[call.label] = call.frame

            with nm:
                rep = replay_step(record, on_call=on_call)
        except NotReplayable:
            return None
        bad_leaves = _backward_watched(rep.backwards, watch)
    if not first or rep is None:
        return None
    node, g_in, g_out = first[0]
    tape = rep.op_of_node.get(id(node))
    entry = nm.nodes.get(id(node))
    module = entry[2] if entry is not None and tape is None else None
    frame = tape[0].frame if tape is not None else node_frame(node)
    model = nm.tags.get(id(node)) if tape is None else None
    if tape is None and frame is None:
        frame = calls.get(model) or next((c.frame for c, _ in rep.calls), None)
    op = node_op(node)
    ev: dict[str, Any] = {}
    if tape is not None:
        ev["recorded op"] = tape[0].name
    elif entry is not None:
        ev["forward call"] = entry[1]
    bad_in = node_evidence(node, g_in, g_out, ev)
    names = _parameter_names(session, bad_leaves)
    if names:
        ev["parameters with non-finite gradients"] = names[:10]
    kind = kind_text(kind_of(bad_in))
    key = "nonfinite.backward" if tape is None else "nonfinite.backward_code"
    several = len({id(c.model) for c in record.calls}) > 1 or len(session.models) > 1
    extra_model = {"model": model} if several and module is not None and model is not None else {}
    f = make("numerical.nonfinite_backward", key, Stage.BACKWARD, step, module=module, **extra_model,
             op=op, parameter=names[0] if names else None, frame=frame, cause=msg("nonfinite.cause.backward", op=op),
             next_check=msg("nonfinite.next.backward"), evidence=ev, kind=kind,
             line=f"{frame.file}:{frame.line}" if frame is not None else "?")
    return _with_by(f, record)


def _backward_watched(backwards: list[Any], watch: FirstNonFiniteNode) -> list[torch.Tensor]:
    """Run the replayed step's backward calls (`torch.autograd.grad`, `.grad` untouched) with
    `watch`'s hook on every node, until one call meets the first non-finite node; returns the
    leaves whose gradient came out non-finite in the last call run."""
    bad_leaves: list[torch.Tensor] = []
    for _bw, roots, grads in backwards:
        roots = [r for r in roots if isinstance(r, torch.Tensor) and r.requires_grad]
        if not roots:
            continue
        nodes = graph_nodes([r.grad_fn for r in roots])
        leaves = [n.variable for n in nodes if type(n).__name__ == "AccumulateGrad"]
        handles = [n.register_hook(watch.hook_for(n)) for n in nodes if type(n).__name__ != "AccumulateGrad"]
        try:
            if leaves:
                gs = grads if grads is None or isinstance(grads, (list, tuple)) else [grads]
                got = torch.autograd.grad(roots, leaves, gs, retain_graph=True, allow_unused=True)
                bad_leaves = [t for t, g in zip(leaves, got) if g is not None and nonfinite(g)]
        finally:
            for h in handles:
                h.remove()
        if watch.first:
            break
    return bad_leaves


def _parameter_names(session: Any, leaves: list[torch.Tensor]) -> list[str]:
    """The parameters among `leaves`, named, in the models' order (not the graph's)."""
    order = {pid: i for i, pid in enumerate(session.param_index.infos())}
    leaves = sorted(leaves, key=lambda t: order.get(id(t), len(order)))
    return [n for n in (session.param_index.name(t) for t in leaves) if n is not None]
