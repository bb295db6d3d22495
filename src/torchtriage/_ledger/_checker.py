"""`DataLedger` (registry name "data_ledger"): where every sample of the data goes (issue 25).

The check follows every DataLoader pass (`_follow.py`) and counts the backward passes and the
forwards with gradients between one batch and the next, so that each batch of each epoch is
known as trained on or not. At the end (closing the last epochs) it judges the invariants
(`_verdicts.py`): coverage, order, splits, and across ranks (`_ranks.py`). Costs: two counter
increments per forward and per backward; per batch a few Python calls and a host index lookup
(first pass: the content digests, on the batch's device); no host read until the end, where the
content digests are read once.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from .._checker import Checker, LossCall
from .._loaderstream import stream
from ._afterloop import AfterLoop
from ._denominator import Denominators
from ._edges import Edges
from ._encoding import Encodings
from ._encoding import judge as judge_encodings
from ._epochs import Epoch, Loader
from ._evalshards import EvalShards
from ._evalsync import EvalSync
from ._follow import Follower
from ._fresh import note as note_fresh
from ._handfed import HandFed
from ._handfed import judge as judge_handfed
from ._handpass import HandPasses
from ._heldgrads import HeldGrads
from ._heldlabels import HeldLabels
from ._passes import conclude as passes_verdicts
from ._passes import exchange as exchange_passes
from ._passes import note as note_pass
from ._ranks import exchange  # (importing it registers the rank comparison with the distributed merge)
from ._repeatable import Repeatable
from ._repeatable import judge as judge_repeatable
from ._scaling import judge as judge_scaling
from ._scaling import judge_stored
from ._sidedata import SideData
from ._unbackwarded import Unbackwarded
from ._units import LossUnits
from ._weights import SamplerLines
from ._workers import Workers
from ._workers import judge as judge_workers

_tokens = itertools.count(1)


class DataLedger(Checker):
    """The data ledger: samples per split, epoch and rank, and the invariants they keep."""

    name = "data_ledger"

    def on_start(self, session: Any) -> None:
        self.backwards = 0
        self.forwards = 0
        self.calls = 0  # root forwards of any kind (a batch used by nothing yet: `Follower.on_batch`)
        self.tokens: weakref.WeakKeyDictionary[nn.Module, int] = weakref.WeakKeyDictionary()
        self.samplers: SamplerLines | None = None
        try:
            self.samplers = SamplerLines(session)  # where weighted samplers are made
        except Exception as e:  # (a torch without it: no sampler verdict)
            session.internal_error("data_ledger.samplers", e)
        self.follower = Follower(session, self)
        self.follower.install()
        self.handfed = HandFed(session, self)
        self.edges = Edges()  # graph links evaluated whose reverse was trained on
        self.sidedata = SideData(self)  # per-sample side data looked up by batch position
        stream(session).listen("ledger.sidedata", self.sidedata)
        self.evalsync = EvalSync(session, self)
        self.evalshards: EvalShards | None = None
        if session.checker("distributed") is not None:  # a rank of several: its evaluation shares
            stream(session).listen("ledger.evalsync", self.evalsync)
            self.evalshards = EvalShards(session, self)  # evaluation sets cut per rank by hand
        self.encodings = Encodings(self)  # each split's label encoding (after the follower: its tokens)
        stream(session).listen("ledger.encoding", self.encodings)
        self.workers = Workers(self)  # samples repeated across DataLoader workers
        stream(session).listen("ledger.workers", self.workers)
        self.repeatable = Repeatable(self)  # evaluation inputs that change from pass to pass
        stream(session).listen("ledger.repeatable", self.repeatable)
        self.loss_units = LossUnits()  # the reduction of each loss output (a batch mean or a batch sum)
        self.denominators = Denominators(self)  # a mean's denominator against the pass's counts
        self.afterloop = AfterLoop(self)  # a step after the batch loop, on its last batch
        stream(session).listen("ledger.afterloop", self.afterloop)
        self.unbackwarded = Unbackwarded(self)  # training forwards whose graph never reaches a backward
        self.heldlabels = HeldLabels(self)  # held-out labels in a loss that is trained on
        self.heldgrads = HeldGrads(self, session)  # an evaluation pass's gradients applied by a training step
        stream(session).listen("ledger.denominator", self.denominators)
        self.handpasses = HandPasses(self)  # evaluation passes over the user's own loaders: their end

    def counters(self) -> tuple[int, int]:
        return self.backwards, self.forwards

    @property
    def loaders(self) -> list[Loader]:
        return self.follower.loaders

    def on_root_forward_pre(self, model: nn.Module, label: str) -> None:
        self.calls += 1
        if model.training and torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
            self.evalsync.training()
            if self.evalshards is not None:
                self.evalshards.training()
            self.forwards += 1
        self.heldlabels.on_forward(model)
        self.heldgrads.on_forward(model)
        last = self.follower.last
        if last is not None:  # the model the latest batch fed (k-fold: one model per fold)
            last.models.add(self.token_of(model))

    def token_of(self, model: nn.Module) -> int:
        token = self.tokens.get(model)
        if token is None:
            token = self.tokens[model] = next(_tokens)
        return token

    def on_root_forward(self, model: nn.Module, label: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                        output: Any) -> None:
        self.handfed.on_forward(model, args, kwargs)
        self.edges.on_forward(model, args, kwargs)
        self.sidedata.on_forward(model, args, kwargs)
        if self.evalshards is not None:
            self.evalshards.on_forward(model, args, kwargs)
        self.heldlabels.on_inputs(args, kwargs)
        self.unbackwarded.on_forward(model, args, kwargs, output)
        self.afterloop.on_forward(model, args, kwargs)
        self.handpasses.on_forward(not model.training and not torch.is_grad_enabled())

    def on_loss(self, call: LossCall) -> None:
        self.loss_units.on_loss(call)
        self.unbackwarded.on_loss(call)
        self.heldlabels.on_loss(call)

    def on_optimizer_step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        self.heldlabels.on_step(optimizer)
        self.heldgrads.on_step(optimizer)
        self.afterloop.on_step()

    def on_backward_end(self, roots: tuple[torch.Tensor, ...]) -> None:
        self.evalsync.training()
        if self.evalshards is not None:
            self.evalshards.training()
        self.backwards += 1
        self.heldgrads.on_backward_end()

    def end_window(self, ep: Epoch) -> None:
        """The last batch's window ends: at StopIteration, or, in a loop that fetches one batch
        ahead (its first batch's window was empty: the second was fetched before any work), when
        another loader yields or the epoch closes (the last batch is trained after the sampler
        ran out)."""
        if ep.sizes and len(ep.backwards) < len(ep.sizes):
            ahead = len(ep.sizes) < 2 or not (ep.backwards[0] or ep.forwards[0])
            if ahead and len(ep.sizes) >= 2 and ep.stop is not None and not any(ep.backwards) \
                    and not any(ep.forwards):
                # No batch saw any work before the sampler ran out: a pass that trains nothing (an
                # evaluation through a functional model, with gradients on), not a loop one batch
                # ahead; the next training loop's backwards are not this last batch's.
                ahead = False
            end = ep.stop if ep.stop is not None and not ahead else self.counters()
            ep.backwards.append(end[0] - ep.mark[0])
            ep.forwards.append(end[1] - ep.mark[1])

    def close(self, entry: Loader, ep: Epoch, *, final: bool = False) -> None:
        """An epoch ends (the loader's next pass began, or the session ends): its last batch's
        window closes, and the epoch is summarized into the loader's ledger."""
        if ep.closed:
            return
        ep.closed = True
        if not ep.complete and ep.expected and ep.batches == ep.expected:
            ep.complete = True  # every batch the sampler promised was delivered
        self.end_window(ep)
        trained = ep.trained()
        ahead = len(ep.backwards) >= 2 and not (ep.backwards[0] or ep.forwards[0])
        if final and ahead and ep.stop is None and trained and not trained[-1]:
            # The session ended in this pass of a loop that fetches a batch ahead and never saw
            # the sampler run out: the batch fetched last was the run stopping (a step limit).
            ep.complete = False
        lost = [i for i, t in enumerate(trained) if not t]
        indexed = bool(ep.roots) and all(r is not None for r in ep.roots)
        if entry.n and indexed:
            if entry.seen is None:
                entry.seen = np.zeros(entry.n, dtype=bool)
                entry.trained_on = np.zeros(entry.n, dtype=bool)
            assert entry.trained_on is not None
            for roots, t in zip(ep.roots, trained):
                entry.seen[roots] = True
                if t:
                    entry.trained_on[roots] = True
        note_pass(entry, ep, trained)
        examples = [int(v) for i in lost[:3] if (r := ep.roots[i]) is not None for v in r[:2].tolist()][:5]
        summary = {
            "epoch": ep.number, "batches": ep.batches, "samples": ep.samples, "complete": ep.complete,
            "trained_batches": sum(trained), "lost_batches": lost[:20], "lost_count": len(lost),
            "lost_samples": sum(ep.sizes[i] for i in lost), "lost_examples": examples,
            "largest_batch": max(ep.sizes, default=0), "order": ep.order.hexdigest() if indexed else None,
            "shuffled": ep.shuffled, "sampler_epoch": ep.sampler_epoch,
            "outer_epoch": ep.outer_epoch, "inner_epochs": ep.inner_epochs, "sampler_cls": ep.sampler_cls,
        }
        note_fresh(entry, ep, summary, indexed)  # a pass cut after its first batch: its samples (`_fresh.py`)
        if indexed and sum(trained) and "roots" not in entry.first:  # the first training epoch's samples (ranks)
            entry.first["roots"] = np.unique(np.concatenate([r for r in ep.roots if r is not None]))
            entry.first["complete"] = ep.complete
        ep.roots = []
        entry.summaries.append(summary)

    def on_end(self) -> None:
        from ._verdicts import conclude

        for entry in self.loaders:
            for ep in entry.epochs:
                self.close(entry, ep, final=True)
        with torch.no_grad():
            conclude(self)
        if self.session is not None:
            for f in passes_verdicts(self):
                self.session.add(f)
            for f in judge_encodings(self, self.encodings):
                self.session.add(f)
            with torch.no_grad():
                for f in judge_workers(self, self.workers):
                    self.session.add(f)
                for f in judge_repeatable(self, self.repeatable):
                    self.session.add(f)
            with torch.no_grad():
                for f in self.sidedata.end():
                    self.session.add(f)
            self.handpasses.end()
            for f in self.denominators.end():
                self.session.add(f)
            for f in self.heldlabels.end():
                self.session.add(f)
            if not any(f.code == "data.preprocessing_fit_on_all" for f in self.session.findings):
                # statistics that know the held-out rows
                for f in judge_scaling(self.loaders) or judge_stored(self.loaders):
                    self.session.add(f)
            for f in self.heldgrads.end():
                self.session.add(f)
            for f in self.afterloop.end():
                self.session.add(f)
            if not any(f.code == "data.coverage_lost" for f in self.session.findings):
                for f in self.unbackwarded.end():  # (the loader's coverage already said it)
                    self.session.add(f)
            codes = {(f.code, f.severity.value) for f in self.session.findings}
            if ("data.split_overlap", "error") not in codes and ("data.heldout_trained", "error") not in codes:
                with torch.no_grad():
                    found = judge_handfed(self.handfed, self.loaders)  # samples without an index
                if found is not None:
                    self.session.add(found)
                else:
                    with torch.no_grad():
                        for f in self.edges.end():  # links split apart from their reverse edges
                            self.session.add(f)
        exchange(self)
        exchange_passes(self)
        if self.evalshards is not None:
            self.evalshards.exchange()
        if self.session is not None:
            for f in self.evalsync.end():
                self.session.add(f)
