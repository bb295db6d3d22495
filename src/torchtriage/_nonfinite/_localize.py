"""From "something was non-finite in this step" to the finding: stage, module, op, line, evidence.

Runs only after the sentinel tripped (it reads values and syncs freely). Each stage has its
own localizer; all of them say "not reproduced on replay" rather than guess.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.nn as nn
from torch.utils._pytree import tree_leaves

from .._catalogue import msg
from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._summary import summarize
from ._families import base_name, explain, kind_of, kind_text
from ._replay import (
    FirstNonFiniteNode,
    NodeMap,
    call_model,
    float_leaves,
    graph_nodes,
    node_evidence,
    node_frame,
    node_op,
    replay_loss,
    replaying,
)
from ._steplocalize import backward as step_backward
from ._steplocalize import forward as step_forward
from ._steplocalize import loss as step_loss
from ._steplocalize import why_not
from ._trace import ModuleStack, OpTracer, Origin, nonfinite


def _finding(code: str, key: str, stage: Stage, step: int, *, module: str | None = None, op: str | None = None,
             parameter: str | None = None, frame: Any = None, cause: str = "", next_check: str = "",
             evidence: dict[str, Any] | None = None, severity: Severity = Severity.ERROR, **fields: Any) -> Finding:
    ev = dict(evidence or {})
    if frame is not None and frame.source:
        ev["source_line"] = frame.source
    model = fields.pop("model", None)
    fmt = dict(step=step, module=_mod_text(module, model), op=op or msg("nonfinite.unknown_op"), parameter=parameter)
    fmt.update(fields)
    if model is not None:
        ev.setdefault("model", model)  # (after the source line: the evidence keeps its order)
    return from_catalogue(Category.NUMERICAL, code, key, fields=fmt, frame=frame, evidence=ev, severity=severity,
                          stage=stage, step=step, module=module, op=op, parameter=parameter, cause=cause,
                          next_check=next_check)


def _namer(session: Any) -> Any:
    # A torch.compile'd root is watched as OptimizedModule; its children are named
    # "_orig_mod.<path>": report the path the user's model has.
    def name_of(m: nn.Module) -> str | None:
        n = session.module_name(m)
        while n is not None and n.startswith("_orig_mod"):
            n = n[len("_orig_mod"):].lstrip(".")
        return n
    return name_of


def _mod_text(module: str | None, model: str | None = None) -> str:
    text = module or msg("nonfinite.root")
    # several models in the step: say which one (issue 11)
    return msg("nonfinite.module_of", module=text, model=model) if model is not None else text


def not_reproduced(stage: Stage, step: int, evidence: dict[str, Any] | None = None,
                   session: Any = None) -> Finding:
    evidence = dict(evidence or {})
    if session is not None:
        # Why the whole-step replay could not run; a step that was not taped arms the tape, so
        # the next occurrence is replayed in full (issue 11).
        why = why_not(session)
        if why is not None:
            evidence.setdefault("why", msg(why))
            if why in ("nonfinite.why.not_taped", "nonfinite.why.no_record") and not getattr(session, "discover", True):
                # watch(): no rerun can follow (only `torchtriage run` reruns the script); say
                # what to do instead (issue 27)
                evidence["what to do"] = msg("nonfinite.why.no_rerun_watch")
            keeper = session.checker("snapshot")
            if why == "nonfinite.why.not_taped" and keeper is not None:
                keeper.arm()
    return _finding(f"numerical.nonfinite_{stage.value}", "nonfinite.not_reproduced", stage, step,
                    cause=msg("nonfinite.cause.not_reproduced"), next_check=msg("nonfinite.next.not_reproduced"),
                    evidence=evidence, severity=Severity.WARNING, stage_name=stage.value)


def _target(model: nn.Module) -> nn.Module:
    # torch.compile wraps the model; replay the original module eagerly (op-level tracing
    # cannot see inside a compiled graph).
    model = getattr(model, "_orig_mod", model)
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        from .._distributed._ddp import replayable

        if not replayable(model):
            return model  # (the distributed check reports such a step without a replay)
        # DDP's forward and backward run collectives; one rank replaying alone would wait for
        # the others forever. The wrapped module computes the same local values (issue 15).
        model = model.module
    return model


def _producer_finding(origin: Origin, stage: Stage, step: int, *, loss: bool = False,
                      frame: Any = None, module: str | None = None, loss_value: float | None = None,
                      model: str | None = None) -> Finding:
    if origin.external == "host":
        return _host_finding(origin, stage, step, frame=frame, module=module, model=model)
    ex = explain(origin.op, origin.inputs, origin.output, scalars=origin.scalars)
    kind = kind_text(kind_of(origin.output))
    frame = origin.frame or frame
    module = origin.module if origin.module is not None else module
    if ex.family == "masked":
        return _finding("numerical.fully_masked_row", "nonfinite.masked_row", stage, step, module=module,
                        op=origin.op, frame=frame, cause=ex.cause, next_check=ex.next_check,
                        evidence=ex.evidence, model=model)
    if loss:
        if loss_value is not None:
            kind = kind_text("nan" if loss_value != loss_value else ("posinf" if loss_value > 0 else "neginf"))
        return _finding("numerical.nonfinite_loss", "nonfinite.loss", stage, step, module=module, op=origin.op,
                        frame=frame, cause=ex.cause, next_check=ex.next_check, evidence=ex.evidence,
                        kind=kind)
    return _finding("numerical.nonfinite_forward", "nonfinite.forward", stage, step, module=module,
                    op=origin.op, frame=frame, cause=ex.cause, next_check=ex.next_check, evidence=ex.evidence,
                    kind=kind, model=model)


def _host_finding(origin: Origin, stage: Stage, step: int, *, frame: Any = None, module: str | None = None,
                  model: str | None = None) -> Finding:
    """A tensor made from host data (numpy, Python floats) already held the non-finite values:
    they were computed before torch saw them, at the line that made the array."""
    out = origin.output
    assert out is not None
    x = torch.view_as_real(out) if out.is_complex() else out
    nan, posinf, neginf = (int(torch.isnan(x).sum()), int(torch.isposinf(x).sum()), int(torch.isneginf(x).sum()))
    module = origin.module if origin.module is not None else module
    return _finding("numerical.nonfinite_host_value", "nonfinite.host", stage, step, module=module,
                    op=origin.op, frame=origin.frame or frame, cause=msg("nonfinite.cause.host"),
                    next_check=msg("nonfinite.next.host"), kind=kind_text(kind_of(out)), model=model,
                    nan=nan, inf=posinf + neginf, numel=out.numel(),
                    evidence={"tensor": summarize(out), "nan": nan, "+inf": posinf, "-inf": neginf})


def localize_forward(session: Any, state: Any, step: int, *, any_kind: bool = False) -> Finding:
    """Replay the step (every model call and the ops between them) or, without a record of it,
    the model's forward, under the op tracer; the producer of the bad output."""
    snap = session.snapshot
    if why_not(session) is None:
        got = step_forward(session, state, step, _namer(session), any_kind)
        if got is not None:
            tracer, bad, call, extra = got
            several = len({id(c.model) for c in snap.record.calls}) > 1 or len(session.models) > 1
            f = _forward_finding(session, tracer, bad, step, call.frame, call.label if several else None)
            if f is not None:
                return f.replace(evidence=dict(f.evidence, **extra))
    if snap is None or not snap.has_batch:
        return not_reproduced(Stage.FORWARD, step, session=session)
    model = _target(snap.model)
    mods = ModuleStack(_namer(session))
    tracer = OpTracer(mods, session.param_index.names())
    tracer.stop_frame = sys._getframe()
    with replaying(session, snap, model, state.autocast), torch.enable_grad(), mods, tracer:
        out = call_model(model, snap)
    bad = [t for t in float_leaves(out) if nonfinite(t, any_kind)]
    if not bad:
        return not_reproduced(Stage.FORWARD, step, {"outputs": [summarize(t) for t in float_leaves(out)[:3]]},
                              session=session)
    # Several models can share module paths ("2"): the finding names the replayed one (evidence
    # "model": the HTML tree marks this model's module only).
    label = session.model_label(snap.model) if len(session.models) > 1 else None
    f = _forward_finding(session, tracer, bad[0], step, getattr(snap, "call_frame", None), label)
    if f is None:
        return not_reproduced(Stage.FORWARD, step, {"output": summarize(bad[0])})
    return f.replace(evidence=dict(f.evidence, localized_by="model_replay"))


def _forward_finding(session: Any, tracer: OpTracer, bad: torch.Tensor, step: int, call_frame: Any,
                     model: str | None = None) -> Finding | None:
    origin = tracer.origin_of(bad)
    if origin is not None and origin.kind == "constant" and origin.external not in (None, "input", "host"):
        name = origin.external
        p = next((t for t, i in session.param_index.tensors() if i.qualname == name), None)
        info = session.param_index.info(p)
        return _finding("numerical.nonfinite_parameter", "nonfinite.forward_param", Stage.PARAMETER, step,
                        module=info.module if info is not None else None, parameter=name,
                        cause=msg("nonfinite.cause.param"), next_check=msg("nonfinite.next.param"),
                        evidence={"parameter": summarize(p)})
    origin = tracer.producer_of(bad)
    if origin is None:
        return None
    # An op inside a library module (nn.Linear's addmm) has no line of the user's own: the
    # user's line is then the one that called the model in this step.
    f = _producer_finding(origin, Stage.FORWARD, step, frame=call_frame,
                          model=model if origin.module is not None else None)
    if origin.propagated_by:
        f = f.replace(evidence=dict(f.evidence, propagated_by=list(origin.propagated_by)))
    if f.code != "numerical.fully_masked_row" and any(src.external == "input" for src in origin.sources):
        # The batch's own -Inf (not a mask: it did not go through softmax) became NaN here:
        # the first non-finite value is in the data.
        d = localize_data(session, step, any_kind=True)
        if d is not None:
            return d.replace(evidence=dict(d.evidence,
                                           **{"became NaN at": f"{origin.op} in {_mod_text(origin.module)}"}))
    return f


def localize_loss(session: Any, state: Any, step: int) -> Finding:
    """The loss is non-finite while the model's NaN/+Inf check passed."""
    if why_not(session) is None:
        found = step_loss(session, state, step, _namer(session), _producer_finding)
        if found is not None:
            return found
    calls = [c for c in state.loss_calls if isinstance(c.output, torch.Tensor) and nonfinite(c.output, True)]
    outs = [t for t in state.outputs if nonfinite(t, True)]
    if calls:
        call = calls[0]
        inputs_bad = [a for a in (call.input, call.target) if isinstance(a, torch.Tensor)
                      and (a.is_floating_point() or a.is_complex()) and nonfinite(a, True)]
        if not inputs_bad:
            mods = ModuleStack(_namer(session))
            tracer = OpTracer(mods)
            tracer.stop_frame = sys._getframe()
            with session.paused(), torch.no_grad(), mods, tracer:
                out = replay_loss(call, [], [])
            origin = tracer.producer_of(out)
            if origin is not None:
                return _producer_finding(origin, Stage.LOSS, step, loss=True, frame=call.frame, module=call.module,
                                         loss_value=state.loss_value)
    if outs:
        # The model's output holds -Inf (ignored by the cheap check: masks use it on purpose),
        # and the loss turned it into NaN/Inf: the producer is inside the model.
        return localize_forward(session, state, step, any_kind=True)
    found = _walk_loss_graph(state, step, calls[0].frame if calls else None)
    if found is not None:
        return found
    return not_reproduced(Stage.LOSS, step, {"loss": state.loss_value, "backward called at":
                                              _where(state.backward_frame)}, session=session)


def _where(frame: Any) -> str | None:
    return f"{frame.file}:{frame.line}" if frame is not None else None


@torch.no_grad()
def _walk_loss_graph(state: Any, step: int, frame: Any) -> Finding | None:
    """Re-evaluate, in forward order, the ops of the loss's graph captured before backward."""
    for _seq, op, saved in sorted(state.loss_nodes, key=lambda n: n[0]):
        name = base_name(op)
        fn = getattr(torch, name, None)
        x = saved.get("self")
        if fn is None or x is None or not (x.is_floating_point() or x.is_complex()):
            continue
        args = [x] + ([saved["other"]] if isinstance(saved.get("other"), torch.Tensor) else [])
        if any(nonfinite(a, True) for a in args if a.is_floating_point()):
            continue
        try:
            out = fn(*args)
        except Exception:
            continue
        if isinstance(out, torch.Tensor) and nonfinite(out, True):
            origin = Origin("computed", f"aten::{name}", None, frame, args, out)
            f = _producer_finding(origin, Stage.LOSS, step, loss=True, frame=frame, loss_value=state.loss_value)
            if state.backward_frame is not None:
                f = f.replace(evidence=dict(f.evidence, **{"backward called at": _where(state.backward_frame)}))
            return f
    return None


def localize_backward(session: Any, state: Any, step: int) -> Finding:
    """Forward and loss finite, gradients not: the first backward node emitting non-finite grads."""
    snap = session.snapshot
    if why_not(session) is None:
        found = step_backward(session, state, step, _namer(session), _finding)
        if found is not None:
            return found
    if snap is None or not snap.has_batch:
        return not_reproduced(Stage.BACKWARD, step, session=session)
    model = _target(snap.model)
    mods = ModuleStack(_namer(session))
    watch = FirstNonFiniteNode()
    first, make_hook = watch.first, watch.hook_for

    handles: list[Any] = []
    call = next((c for c in reversed(state.loss_calls) if isinstance(c.output, torch.Tensor)), None)
    with replaying(session, snap, model, state.autocast), torch.enable_grad(), \
            torch.autograd.set_detect_anomaly(True, check_nan=False), mods:
        nm = NodeMap(mods)
        with nm:
            out = call_model(model, snap)
            floats = [t for t in float_leaves(out) if t.requires_grad]
            loss = replay_loss(call, state.outputs, floats) if call is not None else None
        roots = [loss] if isinstance(loss, torch.Tensor) and loss.requires_grad else floats
        grad_out = None if roots is not floats else [torch.ones_like(t) for t in floats]
        params = [p for p in model.parameters() if p.requires_grad]
        if not roots or not params:
            return not_reproduced(Stage.BACKWARD, step, session=session)
        nodes = graph_nodes([r.grad_fn for r in roots])
        try:
            for n in nodes:
                if type(n).__name__ != "AccumulateGrad":
                    handles.append(n.register_hook(make_hook(n)))
            torch.autograd.grad(roots, params, grad_out, retain_graph=True, allow_unused=True)
        finally:
            for h in handles:
                h.remove()
    if not first:
        return not_reproduced(Stage.BACKWARD, step, {"loss": state.loss_value}, session=session)
    node, g_in, g_out = first[0]
    entry = nm.nodes.get(id(node))
    module = entry[2] if entry else None
    if entry is None:
        for other, _name, mod in nm.nodes.values():
            if any(nxt is node for nxt, _ in getattr(other, "next_functions", ())):
                module = mod
                break
    op = node_op(node)
    ev: dict[str, Any] = {}
    if entry is not None:
        ev["forward call"] = entry[1]
    bad_in = node_evidence(node, g_in, g_out, ev)
    if call is None:
        ev["note"] = ("replayed with a gradient of ones at the model outputs "
                      "(the loss was not a torch.nn.functional call)")
    kind = kind_text(kind_of(bad_in))
    return _finding("numerical.nonfinite_backward", "nonfinite.backward", Stage.BACKWARD, step, module=module,
                    op=op, frame=node_frame(node), cause=msg("nonfinite.cause.backward", op=op),
                    next_check=msg("nonfinite.next.backward"), evidence=ev, kind=kind)


@torch.no_grad()
def localize_update(session: Any, step: int, grad_norm: float | None,
                    versions: dict[int, int] | None = None) -> list[Finding]:
    """Parameters / optimizer state non-finite after an optimizer step. `versions`: each
    parameter's version right after that step; one written since is not the update's doing."""
    names = session.param_index.names()
    found: list[Finding] = []
    for opt in session.optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                if versions is not None and versions.get(id(p), p._version) != p._version:
                    continue
                name = names.get(id(p), f"{type(opt).__name__} param #{len(found)}")
                info = session.param_index.info(p)
                owner = info.module if info is not None and not info.raw else None
                if nonfinite(p):
                    ev = {"parameter": summarize(p), "lr": group.get("lr"), "grad norm at that step": grad_norm}
                    found.append(_finding("numerical.nonfinite_update", "nonfinite.update", Stage.OPTIMIZER, step,
                                          module=owner, parameter=name,
                                          cause=msg("nonfinite.cause.update", lr=group.get("lr")),
                                          next_check=msg("nonfinite.next.update"), evidence=ev,
                                          optimizer=type(opt).__name__))
                    continue
                for key, v in opt.state.get(p, {}).items():
                    if isinstance(v, torch.Tensor) and v.is_floating_point() and nonfinite(v):
                        found.append(_finding("numerical.nonfinite_optimizer_state", "nonfinite.state",
                                              Stage.OPTIMIZER, step, module=owner,
                                              parameter=name, cause=msg("nonfinite.cause.state"),
                                              next_check=msg("nonfinite.next.state"),
                                              evidence={key: summarize(v), "lr": group.get("lr")},
                                              state=key, optimizer=type(opt).__name__))
                        break
    return found[:1]


def localize_data(session: Any, step: int, any_kind: bool = False) -> Finding | None:
    snap = session.snapshot
    if snap is None or not snap.has_batch:
        return None
    from torch.utils._pytree import keystr, tree_flatten_with_path

    leaves, _ = tree_flatten_with_path((snap.args, snap.kwargs))
    for path, t in leaves:
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and nonfinite(t, any_kind):
            where = keystr(path)
            f = _finding("numerical.nonfinite_data", "nonfinite.data", Stage.DATA, step,
                         cause=msg("nonfinite.cause.data"), next_check=msg("nonfinite.next.data"),
                         evidence={"input": summarize(t), "where": where}, kind=kind_text(kind_of(t)),
                         input=where)
            return _before_model(session, f, t, any_kind)
    return None


def _before_model(session: Any, f: Finding, bad: torch.Tensor, any_kind: bool) -> Finding:
    """The batch was made non-finite by the step's own code before the model (a normalization by
    a zero sum, a log of the raw input): the recorded op that produced it, re-run alone under the
    op tracer, gives the op, the family's cause and the user's line (issue 11)."""
    record = session.snapshot.record
    ops = [op for op in record.ops if op.before_step]
    producer = None
    target = bad
    for op in reversed(ops):
        outs = [o for o in tree_leaves(op.output) if isinstance(o, torch.Tensor)]
        name = getattr(op.func, "__name__", "")
        writes = (name.endswith("_") and not name.startswith("__")) or name == "__setitem__"
        if writes and op.args and op.args[0] is target:
            producer = op  # the last in-place write into it (x[i] = nan): its input is gone
            break
        if not any(o is target for o in outs):
            continue
        producer = op
        inputs = [a for a in tree_leaves((op.args, op.kwargs)) if isinstance(a, torch.Tensor)]
        if any(a is target for a in inputs):
            break  # in place: its input is gone
        earlier = next((a for a in inputs
                        if (a.is_floating_point() or a.is_complex()) and nonfinite(a, any_kind)), None)
        if earlier is None:
            break  # finite inputs, non-finite output: this op
        target = earlier
    if producer is None:
        return f
    ev = dict(f.evidence, localized_by="step_record", **{"produced by": producer.name})
    cause, next_check = f.cause, f.next_check
    leaves = tree_leaves((producer.args, producer.kwargs))
    inputs = [a for a in leaves if isinstance(a, torch.Tensor)]
    # never re-run a write, nor an op drawing from the user's generator (it would advance it)
    if not any(a is target for a in inputs) and not any(isinstance(a, torch.Generator) for a in leaves):
        mods = ModuleStack(_namer(session))
        tracer = OpTracer(mods)
        try:
            rng = torch.get_rng_state()
            try:
                with session.paused(), torch.no_grad(), tracer:
                    out = producer.func(*producer.args, **producer.kwargs)
            finally:
                torch.set_rng_state(rng)  # a random op re-run leaves the run's RNG as it was
            origin = tracer.origin_of(next((o for o in tree_leaves(out) if isinstance(o, torch.Tensor)), None))
            origin = origin if origin is not None and origin.kind == "computed" else (
                tracer.producers[0] if tracer.producers else None)
            if origin is not None:
                ex = explain(origin.op, origin.inputs, origin.output, scalars=origin.scalars)
                cause, next_check = ex.cause, ex.next_check
                ev.update(ex.evidence)
                ev["produced by"] = origin.op
        except Exception:
            pass
    frame = producer.frame
    if frame is not None and frame.source:
        ev["source_line"] = frame.source
    # (`op` stays unset: a data finding's signature must not depend on whether the run recorded
    # the code before the model; a bundle replay feeds the batch directly)
    return f.replace(file=frame.file if frame else None, line=frame.line if frame else None,
                     cause=cause, next_check=next_check, evidence=ev)
