"""`LedgerChecker` ("step_ledger"): the step ledger in a session (issue 26).

Events → `StepLedger` (terms → parameters → optimizer → applied or dropped), the scaled-gradient
watch (clip before `unscale_`), frozen parameters moved by a step, and the evaluation-dropout
watch (a wrapper, every call). The check takes part in the steps of `_cadence.sampled`; terms
are split on those whose step tape is on (the first `step_tape_steps`, 3 by default); a pending
term keeps the check in the steps that follow until it is settled. No device read: identities,
version counters and Python attributes only.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from .. import _cadence
from .._checker import Checker
from .._findings import Category, Severity, Stage, from_catalogue
from .._frames import UserFrame, user_frame_from_stack
from ._amp import ScaledGradWatch
from ._baseline import BaselineWatch
from ._bestrecord import BestRecords
from ._bestsave import BestSaves
from ._counter import StepCounters
from ._discarded import DiscardWatch, patch_zero_grad
from ._dropout import EvalDropoutWatch
from ._evalrandom import EvalRandomWatch
from ._evalundone import EvalUndone
from ._frozenpart import FrozenPart
from ._ledger import StepLedger, Verdict
from ._loads import LoadWatch
from ._moduleflag import ModuleFlag
from ._moves import FrozenMoves
from ._origins import Origins
from ._plainweights import PlainWeights
from ._ranks import RankWatch
from ._resume import CheckpointWatch
from ._selfload import Snapshots
from ._sinks import GradSinks
from ._stale import StaleSteps
from ._terms import Event, Flow, skeleton, terms_of
from ._twice import RepeatedSteps
from ._unfreeze import UnfreezeWatch
from ._updates import UpdateWatch


def _at(frame: UserFrame | None) -> str | None:
    return f"{frame.file}:{frame.line}" if frame is not None else None


def _short(frame: UserFrame | None) -> str | None:
    return f"{os.path.basename(frame.file)}:{frame.line}" if frame is not None else None


class LedgerChecker(Checker):
    name = "step_ledger"

    def __init__(self) -> None:
        super().__init__()
        self.ledger: StepLedger | None = None
        self.origins: Origins | None = None
        self.amp: ScaledGradWatch | None = None
        self.dropout: EvalDropoutWatch | None = None
        self._reported: set[tuple[Any, ...]] = set()
        self.moves: FrozenMoves | None = None
        self.flags: ModuleFlag | None = None
        self.stale: StaleSteps | None = None
        self.undone: EvalUndone | None = None
        self.frozen_part: FrozenPart | None = None
        self.updates: UpdateWatch | None = None
        self.ranks: RankWatch | None = None
        self.evalrandom: EvalRandomWatch | None = None
        self._eval_only = False  # awake only for a step that began with an evaluation forward
        self.discards: DiscardWatch | None = None
        self.best_saves: BestSaves | None = None
        self.best_records: BestRecords | None = None
        self._previous: list[Event] = []
        self._ended = -2  # the record of the step before (a GAN's G ran in it)
        self.sinks: GradSinks | None = None
        self.twice: RepeatedSteps | None = None
        self.counters: StepCounters | None = None
        self.plain: PlainWeights | None = None
        self.baseline: BaselineWatch | None = None
        self.unfreeze: UnfreezeWatch | None = None
        self.checkpoints: CheckpointWatch | None = None
        self._walked = False

    def on_start(self, session: Any) -> None:
        self.session = session
        self.ledger = StepLedger(session)
        self.discards = DiscardWatch(session)
        self.amp = ScaledGradWatch(session, self._offered, self.discards)
        self.amp.install()
        self.dropout = EvalDropoutWatch(session)
        self.dropout.install()
        self.moves = FrozenMoves(session)
        self.flags = ModuleFlag(session)
        self.stale = StaleSteps(session)
        self.undone = EvalUndone(session)
        self.undone.install()
        self.frozen_part = FrozenPart(session, self.undone)
        self.updates = UpdateWatch(session)
        self.ranks = RankWatch(session)
        self.evalrandom = EvalRandomWatch(session)
        self.sinks = GradSinks(session)
        self.twice = RepeatedSteps(session)
        self.counters = StepCounters(session)
        self.plain = PlainWeights(session)
        self.baseline = BaselineWatch(session)
        self.unfreeze = UnfreezeWatch(session)
        for opt in session.optimizers:
            self.unfreeze.optimizer(opt)
        patch_zero_grad(session, self.discards)
        self.checkpoints = CheckpointWatch(session)
        self.checkpoints.install()
        self.best_saves = BestSaves(session, self.checkpoints)
        self.best_saves.install()
        self.best_records = BestRecords(session)
        self.best_records.install()
        self.origins = Origins(session)
        snapshots = Snapshots(session, self.origins.taken)
        snapshots.install()
        LoadWatch(session, snapshots, self.origins, self.checkpoints).install()

    def on_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        if self.origins is not None:
            self.origins.built(optimizer)
        if self.unfreeze is not None:
            self.unfreeze.optimizer(optimizer)

    def on_model(self, model: torch.nn.Module, label: str) -> None:
        if self.unfreeze is not None:
            self.unfreeze.model(model)
        if self.ranks is not None:
            self.ranks.model(model, label)

    def wants_step(self, step: int) -> bool:
        return _cadence.sampled(step) or bool(self.ledger is not None and self.ledger.pending) \
            or bool(self.discards is not None and self.discards.pending) \
            or not torch.is_grad_enabled() or torch.is_inference_mode_enabled()  # (an evaluation begins it)

    def on_root_forward_pre(self, model: torch.nn.Module, label: str) -> None:
        if self.best_saves is not None and not model.training and not torch.is_grad_enabled():
            self.best_saves.evaluation_forward()
            if self.checkpoints is not None:
                self.checkpoints.final.eval_forward(model)
        if self.best_records is not None and not model.training:
            self.best_records.evaluation_forward()  # (with gradients or not: a validation pass)
        if self.evalrandom is not None:
            self.evalrandom.root_forward(model)
            if not model.training:
                self.evalrandom.forward_pre(model, label)

    def on_root_forward(self, model: torch.nn.Module, label: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                        output: Any) -> None:
        if self.evalrandom is not None and self.evalrandom.mode is not None:
            self.evalrandom.forward(model, label)

    def on_exception(self, exc: BaseException) -> None:
        if self.evalrandom is not None:
            self.evalrandom.drop()

    # ------------------------------------------------------------------ events
    def on_step_end(self, step: int) -> None:
        if self._eval_only:
            return
        snap = self.session.snapshot if self.session is not None else None
        record = snap.record if snap is not None else None
        self._previous = skeleton(record, upstream=True) if record is not None and record.taped else []
        self._ended = step
        if self.ranks is not None:
            self.ranks.step_end(step)
        if self.updates is not None:
            self.updates.step_end()

    def on_step_begin(self, step: int) -> None:
        self._eval_only = not (_cadence.sampled(step) or bool(self.ledger is not None and self.ledger.pending)
                               or bool(self.discards is not None and self.discards.pending))
        if self._eval_only:
            return  # the rest of the ledger sits this step out, as it would asleep
        if self._ended != step - 1:
            self._previous = []  # the check sat out the step before: nothing to join
        if self.ranks is not None:
            self.ranks.step_begin(_cadence.sampled(step))
        if self.discards is not None:
            self.discards.step_begin(step)

    def on_backward(self, roots: tuple[torch.Tensor, ...], grads: Any) -> None:
        if self.evalrandom is not None:
            self.evalrandom.backward()
        if self._eval_only:
            return
        assert self.ledger is not None and self.amp is not None and self.session is not None
        self._report(self.ledger.backward_begin())
        self.amp.backward(roots)
        if self.ranks is not None:
            self.ranks.backward(roots)
        if self.discards is not None:
            self.discards.backward_begin()
        if self.sinks is not None:
            nodes = self.sinks.backward(roots)
            self._walked = nodes is not None
            if nodes is not None and self.plain is not None:
                self.plain.nodes(nodes)
            if nodes is not None and self.baseline is not None:
                self.baseline.nodes(nodes)
        snap = self.session.snapshot
        record = snap.record if snap is not None else None
        if record is None or not record.taped:
            return
        flow: Flow | None = None
        frame = None
        for root in roots:
            if not isinstance(root, torch.Tensor) or root.numel() != 1 or not root.requires_grad:
                continue
            flow = flow or Flow(self._previous, record)
            terms = terms_of(root, record, flow)
            if terms:
                frame = frame or user_frame_from_stack(3)
                self.ledger.backward(terms, self.session.step, frame)

    def on_backward_end(self, roots: tuple[torch.Tensor, ...]) -> None:
        if self._eval_only:
            return
        assert self.ledger is not None
        self._report(self.ledger.backward_end())
        if self.updates is not None:
            self.updates.backward_end()
        if self.sinks is not None and self._walked:
            self._walked = False
            self.sinks.backward_end()
        if self.stale is not None:
            self.stale.backward_end(roots)
        if self.twice is not None:
            self.twice.backward_end()
        if self.discards is not None and self.session is not None:
            self.discards.backward_end(self.session.step)

    def on_optimizer_step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        if self._eval_only:
            return
        assert self.ledger is not None and self.amp is not None
        self.ledger.optimizer_step(optimizer)
        self.amp.stepped()
        if self.discards is not None:
            self.discards.optimizer_step(optimizer)
            self.discards.step_entered()
        if self.moves is not None:
            self.moves.pre(optimizer)
        if self.flags is not None:
            self.flags.pre(optimizer)
        if self.stale is not None:
            self.stale.step_pre(optimizer)
        if self.twice is not None:
            self.twice.step_pre(optimizer)
        if self.counters is not None:
            self.counters.step_pre(optimizer)
        if self.ranks is not None:
            self.ranks.optimizer_step(optimizer)
        if self.updates is not None:
            self.updates.step_pre(optimizer)
        if self.frozen_part is not None:
            self.frozen_part.step_pre(optimizer)

    def on_optimizer_step_post(self, optimizer: torch.optim.Optimizer) -> None:
        if self.checkpoints is not None:
            self.checkpoints.stepped(optimizer)
        if self.best_records is not None:
            self.best_records.stepped()
        if self._eval_only:
            return
        if self.discards is not None:
            self.discards.step_left()
        if self.moves is not None:
            self.moves.post(optimizer)
        if self.twice is not None:
            self.twice.step_post(optimizer)
        if self.counters is not None:
            self.counters.step_post(optimizer)
        if self.flags is not None:
            self.flags.post(optimizer)
        if self.updates is not None:
            self.updates.stepped(optimizer)
        if self.sinks is not None:
            self.sinks.stepped()

    def _offered(self, optimizer: torch.optim.Optimizer) -> None:
        if self.ledger is not None:
            self.ledger.optimizer_step(optimizer)
        if self.discards is not None:
            self.discards.optimizer_step(optimizer)

    def on_end(self) -> None:
        if self.evalrandom is not None:
            self.evalrandom.end()
        if self.ledger is not None:
            self._report(self.ledger.end())
        if self.discards is not None and self.session is not None:
            for f in self.discards.end():
                self.session.add(f)
        if self.counters is not None and self.session is not None:
            for f in self.counters.end():
                self.session.add(f)
        if self.twice is not None and self.session is not None:
            for f in self.twice.end():
                self.session.add(f)
        if self.moves is not None and self.session is not None:
            for f in self.moves.end():
                self.session.add(f)
        if self.best_saves is not None and self.session is not None:
            for f in self.best_saves.end():
                self.session.add(f)
        if self.best_records is not None and self.session is not None:
            done = {(f.code, f.step) for f in self.session.findings}
            for f in self.best_records.end():
                if f.code == "checkpoint.snapshot_aliased" and any(c == f.code for c, _ in done):
                    continue  # the restore of that snapshot already said it
                self.session.add(f)
        if self.updates is not None and self.session is not None:
            explained = _explained_parameters(self.session.findings)
            for f in self.updates.end():
                # parameters in no optimizer (or held by a stale one) already have their finding:
                # that they did not move is its consequence, not a second cause
                if f.code == "gradient.not_moved" and f.parameter in explained:
                    continue
                self.session.add(f)
        if self.sinks is not None and self.session is not None:
            explained = _explained_parameters(self.session.findings, quiet_too=True)
            for f in self.sinks.end(explained):
                self.session.add(f)
        if self.plain is not None and self.session is not None:
            for f in self.plain.end():
                self.session.add(f)
        if self.baseline is not None and self.session is not None:
            for f in self.baseline.end():
                self.session.add(f)
        if self.unfreeze is not None and self.session is not None and self.updates is not None:
            for f in self.unfreeze.end(self.updates.steps):
                self.session.add(f)
        if self.checkpoints is not None and self.session is not None:
            for f in self.checkpoints.end():
                self.session.add(f)
        if self.ranks is not None and self.session is not None:
            for f in self.ranks.end():
                self.session.add(f)
        if self.undone is not None and self.session is not None:
            for f in self.undone.end():
                self.session.add(f)
        if self.frozen_part is not None and self.session is not None:
            for f in self.frozen_part.end():
                self.session.add(f)

    # ------------------------------------------------------------------ findings
    def _report(self, verdicts: list[Verdict]) -> None:
        sess = self.session
        if sess is None:
            return
        for v in verdicts:
            t = v.term
            key = (_at(t.frame), tuple(sorted(v.missed.values())))
            if key in self._reported:
                continue
            self._reported.add(key)
            models = ", ".join(sorted(set(v.missed.values())))
            reached = sorted(set(t.reached.values()))
            # (one entry per line: a helper summed on several terms is one line)
            others = list(dict.fromkeys(f"{op or 'term'} ({_at(fr)})" for op, fr, r in t.siblings if set(v.missed) & r))
            short = list(dict.fromkeys(f"{op or 'term'} ({_short(fr)})" for op, fr, r in t.siblings
                                       if set(v.missed) & r))
            evidence: dict[str, Any] = {
                "term": t.op, "term_line": _at(t.frame), "computed_from": sorted(set(t.sources.values())),
                "reaches_models": reached or "no trainable parameter", "trainable_parameters_reached": t.n_params,
                "gradient_applied": False, "stepped_without_it": sorted(set(v.missed.values())),
                "trained_by_terms": others, "backward_line": _at(t.backward)}
            if t.cut is not None:
                evidence["cut_at"] = f"{_at(t.cut)} ({t.cut_op})"
            fields = {"term": t.op or "term", "model": models,
                      "reach": ", ".join(reached) if reached else "-", "others": "; ".join(short) or "-",
                      "cut": f"{t.cut_op} at {_short(t.cut)}" if t.cut is not None else "-"}
            variant = "reach" if reached else "nothing"
            constant = t.constant and t.cut is None
            cause = "ledger.term_detached.cause.constant" if constant else "ledger.term_detached.cause"
            if t.constant:
                evidence["requires_grad"] = False
            sess.add(from_catalogue(Category.GRADIENT, "gradient.term_detached", f"ledger.term_detached.{variant}",
                                    fields=fields, cause_key=cause,
                                    next_key="ledger.term_detached.next", frame=t.frame, evidence=evidence,
                                    source_line=True, severity=Severity.WARNING, stage=Stage.BACKWARD,
                                    step=t.step, op=t.op))


def _explained_parameters(findings: Any, quiet_too: bool = False) -> set[str]:
    """Parameters that a loud optimizer-membership finding already names (or a quiet one too)."""
    out: set[str] = set()
    for f in findings:
        if f.code not in ("gradient.optimizer_stale", "gradient.not_in_optimizer") \
                or (f.severity is Severity.INFO and not quiet_too):
            continue
        if f.parameter:
            out.add(f.parameter)
        for key in ("model_params_not_in_optimizer", "parameters"):
            names = f.evidence.get(key)
            if isinstance(names, (list, tuple)):
                out.update(str(n) for n in names)
    return out
