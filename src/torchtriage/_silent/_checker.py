"""`SilentChecker`: the silent-bug checks, automatic in `watch` and `run`.

Costs, by design (see ARCHITECTURE.md, `_silent/`):
  * warm-up steps only (`silent_warmup`, default 3): loss-input semantics, token shift / PAD,
    target-in-input, built-in loss broadcasting, and the loss region (the step tape's ops
    between the root forward's end and backward; the frame keeps the tape on for these steps)
    for hand-written losses;
  * every step, Python attribute reads only: zero_grad, kept loss graphs, train/eval mode;
  * the first `silent_collapse_steps` losses, kept on the device and read once;
  * the exp walk on warm-up steps and then every `silent_exp_every` steps.
All numbers a check needs are queued in `DeferredFlags` and read together at the step's end.

Sampled steps (`wants_step`, schedule in `_cadence`): the bugs of the every-step checks show on
every step they occur in, so after the first `_cadence.FULL` steps (at least the warm-up and the
loss-collapse window) the check takes part in a pair of steps every `_cadence.EVERY`, in the exp
walk's steps, and in every step that begins with an evaluation forward (no_grad /
inference_mode at the step's first module call: an evaluation pass, where train() mode is
judged) or while such a judgement is pending. The zero_grad watch forgets what it sampled
before a step it sat out (it compares a step with the one before).
"""

from __future__ import annotations

import math
import os
import sys
import weakref
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from .. import _cadence, _deferred
from .._checker import Checker, LossCall
from .._findings import Category, Finding, Severity, Stage
from .._frames import user_frame_from_stack, user_stack_frame
from .._modestack import own_modes_off
from ._averaged import AveragedCopies
from ._batchtwice import batch_of, twice_plans
from ._bufferchain import BufferChain, buffer_finding
from ._carried import GraphCarry, call_path, carried_finding
from ._channels import ChannelLayoutWatch
from ._clampsign import clamp_plans
from ._common import finding, first_tensor, fmt, is_index_tensor, same_storage, shape
from ._divisor import division_plans
from ._exp_site import locate_in_forward, storage_of
from ._flags import DeferredFlags
from ._graphrows import GraphRows
from ._intscale import int_scale_plans
from ._keptgraphs import KeptGraphs, kept_finding
from ._livetarget import LiveTargets
from ._loop import GraphKeeper, ZeroGradWatch, in_update_bn, stochastic_modules, trainable_stochastic_modules
from ._loss_inputs import ELEMENTWISE_LOSSES, loss_plans
from ._metricstate import MetricStates
from ._mixweight import mix_weight_verdict, pasted_share
from ._node_site import INPUT_VERDICTS, input_module
from ._noisetarget import noise_rows_plan
from ._offset import offset_plans
from ._opposed import Probe, pairs, uses
from ._overflow import exp_nodes, overflow_verdict
from ._pad_mask import PadAttention
from ._pad_values import PadValues
from ._padmean import padmean_plans, position_loss_plan
from ._pairing import dense_input, is_dense_target, misaligned_plan
from ._plans import Plan, verdict_to_finding
from ._region import LossRegion
from ._sampling import TrainModeOutputs
from ._selfpairs import self_pair_plans
from ._sequence import token_plans
from ._shapes import aligned, broadcast_finding, grows
from ._sidecall import SideCalls
from ._softmax_axis import axis_plans, locate, root_output_nodes, signature, singleton_verdicts, walk
from ._statechain import StateChain, state_finding
from ._target_mask import MaskFollow, mask_plan
from ._targetcopy import frozen_copies, unsynced_copies
from ._terminal import TerminalMasks
from ._whole import marks_padding, probe_call, reads_whole_input

if TYPE_CHECKING:
    from .._session import Session


class SilentChecker(Checker):
    """Finds computations that run, raise nothing, and are wrong (registry name "silent")."""

    name = "silent"
    session: Session  # attached before on_start: every event below runs with it

    def on_start(self, session: Any) -> None:
        opts = session.options
        self.warmup = int(opts.get("silent_warmup", 3))
        self.exp_every = int(opts.get("silent_exp_every", 64))
        self.collapse_steps = int(opts.get("silent_collapse_steps", 20))
        self.flags = DeferredFlags()
        _deferred.ride(session, self.flags)  # read along with the step's one read
        self.graphs = GraphKeeper()
        self.kept = KeptGraphs()  # model outputs and create_graph grads kept across steps
        self.terminal = TerminalMasks(session)  # bootstraps that cross episode ends (`_terminal`)
        self.live_targets = LiveTargets(session, self.flags.add)  # targets with grad into trained params
        self.carry = GraphCarry()  # graphs that grow across steps through a carried state
        self.zero = ZeroGradWatch()
        self.averaged = AveragedCopies(session)
        self.metric_states = MetricStates(session)
        self.pads = PadAttention(session)
        self.pad_values = PadValues(session)  # padded values reaching real positions (`_pad_values.py`)
        self.sides = SideCalls(session, self._side_call)
        self.layouts = ChannelLayoutWatch(session, self.flags)
        self.region: LossRegion | None = None
        self._rebuilt: set[Any] = set()  # loss lines whose targets a whole-input model reconstructs
        self._dense: dict[Any, int] = {}  # loss lines with a dense target -> warm-up calls measured (`_pairing`)
        self._dense_pending: tuple[torch.Tensor, Any, str | None, Any] | None = None  # a loss inside the root call
        self._step_losses: list[tuple[Any, Any, Any, Any]] = []  # this step's training losses (`_mixweight`)
        self._mix_holds = 0  # times the tape was kept on for a mixed loss seen after the warm-up
        self._mix_judged: set[Any] = set()  # mixed-loss lines a taped step showed without a paste
        self.sampling: TrainModeOutputs | None = None
        self._leaving: list[TrainModeOutputs] = []  # inactive modes still on the stack
        self._stochastic: weakref.WeakKeyDictionary[nn.Module, list[str]] = weakref.WeakKeyDictionary()
        self._eval_forwards: list[tuple[weakref.ref[nn.Module], str, Any]] = []
        self._train_in_eval: dict[int, tuple[str, Any, int, list[str], int]] = {}
        self._side_first: dict[int, str] = {}  # id(model) -> its first stochastic module seen in a side call
        self._losses: list[torch.Tensor] = []
        self._loss_frame: Any = None
        self._reported: set[tuple[Any, ...]] = set()
        self._warm_sites: set[Any] = set()  # the loss lines checked on the warm-up steps
        self._late_sites: dict[Any, int] = {}  # loss lines first called later -> calls checked
        self._shape_sites: set[Any] = set()  # loss lines whose shapes only were checked (`_late_broadcast`)
        self._mask_sites: dict[Any, int] = {}  # per-token loss lines -> calls followed to their mask
        self._mask_follow: MaskFollow | None = None
        self._mask_leaving: list[MaskFollow] = []  # followers still to take off the stack
        self._backward_in_step = False
        self._sites: dict[tuple[Any, ...], tuple[Any, str | None]] = {}
        self._pairs_seen: set[Any] = set()  # contrastive pairs already reported (`_selfpairs.py`)
        self._autocast: list[tuple[str, torch.dtype]] = []
        self._probes: list[Probe] = []  # gradient hooks of the opposed-rows check, this backward only
        self._divisions_seen: set[int] = set()  # the taped ops already judged (a step's second backward)
        self._holders: dict[Any, Any] = {}  # a loss line -> the accumulator line found keeping it
        self._held_axis: list[Finding] = []  # softmax-axis findings, added at the end (`_add_held_axis`)
        self._full = max(_cadence.FULL, self.warmup, self.collapse_steps)
        self._last_step = -1  # the last step taken part in
        self._in_root = 0  # root model calls in progress (a loss computed inside the model's forward)
        self._offset_pending: list[tuple[Any, ...]] = []  # token losses inside a root forward (`_offset.py`)
        self.graph_rows = GraphRows()  # the rows a loss supervises, against the step's graph (`_graphrows.py`)
        self._scaled_read: set[int] = set()  # tape ops already read for integer data scaling
        self.states = StateChain()  # a state carried with its graph across forwards (`_statechain.py`)
        self.buffers = BufferChain()  # a buffer whose graph chains across steps (`_bufferchain.py`)
        keeper = session.checker("snapshot")
        if keeper is not None and self.warmup > 0:
            keeper.hold_tape(self.warmup)  # the loss region reads the step tape on the warm-up steps

    # ------------------------------------------------------------------ helpers
    @property
    def _step(self) -> int:
        return self.session.step

    def _warm(self) -> bool:
        return self._step < self.warmup

    def _add(self, f: Finding) -> None:
        self.session.add(f)

    def _queue(self, plans: list[Plan], *, frame: Any, op: str | None, module: str | None = None,
               inp: torch.Tensor | None = None, whole: Any = None) -> None:
        step = self._step
        for plan in plans:
            def done(vals: list[float], plan: Plan = plan) -> None:
                v = plan.decide(vals)
                if v is not None and whole is not None and self._reconstructs(v, frame, whole):
                    if v["name"] == "labels_not_shifted":
                        return  # targets equal to the inputs of a model that reads them all: a reconstruction
                    v = dict(v, severity=Severity.INFO)  # its padding is part of what it rebuilds
                if v is not None:
                    if v["name"] in INPUT_VERDICTS and inp is not None:
                        v = self._with_producer(v, inp, frame)
                    self._add(verdict_to_finding(v, frame=frame, step=step, op=op, module=module))
            if plan.values:
                self.flags.add(plan.values, done)
            else:
                done([])

    def _reconstructs(self, v: dict[str, Any], frame: Any, whole: Any) -> bool:
        """A `labels_not_shifted` verdict on a model that reads its whole input (`_whole.py`), or
        the unmasked `pad_in_loss` of the same loss line after one."""
        if v["name"] == "pad_in_loss" and v.get("severity") is Severity.WARNING:
            # a model told by its own mask argument that those positions are padding, whose loss
            # still counts them: not what a reconstruction rebuilds
            return frame in self._rebuilt and not marks_padding(whole, v.get("pad"))
        if v["name"] != "labels_not_shifted":
            return False
        model = whole[0]()
        if model is None or not reads_whole_input(model, *whole[1:]):
            return False
        self._rebuilt.add(frame)
        return True

    def _with_producer(self, v: dict[str, Any], inp: torch.Tensor, frame: Any) -> dict[str, Any]:
        """The verdict on the module whose output the loss input is (the model's nn.Softmax),
        found once per verdict and loss line."""
        key = ("producer", v["name"], frame)
        if key not in self._sites:
            node = v.get("_node")  # the verdict names another node than the input's own producer
            self._sites[key] = (input_module(self.session, inp, self._autocast, node=node), None)
        site = self._sites[key][0]
        if site is None:
            return v
        ev = dict(v.get("evidence") or {}, made_by=f"{site.func} ({site.module or '<root>'})")
        if site.frame is not None:
            ev["made_at"] = f"{os.path.basename(site.frame.file)}:{site.frame.line}"
        return dict(v, module=site.module, evidence=ev)

    def _stochastic_of(self, model: nn.Module) -> list[str]:
        found = self._stochastic.get(model)
        if found is None:
            found = self._stochastic[model] = stochastic_modules(model)
        return found

    def _pop_left_modes(self) -> None:
        self._leaving = [m for m in self._leaving if not m.leave()]

    def _leave_region(self) -> None:
        self.region = None

    # ------------------------------------------------------------------ events
    def on_model(self, model: nn.Module, label: str) -> None:
        if self._stochastic_of(model):
            self.sides.watch(model)
        try:
            self.layouts.watch(model)
        except Exception as e:
            self.layouts.close()
            self.session.internal_error("silent.channels_last_reshaped", e)
        try:
            self.pads.watch(model)
        except Exception as e:
            self.pads.close()
            self.session.internal_error("silent.pad_attended", e)
        try:
            self.pad_values.watch(model)
        except Exception as e:
            self.pad_values.close()
            self.session.internal_error("silent.padding_reaches_real", e)

    def wants_step(self, step: int) -> bool:
        try:
            if _cadence.sampled(step, self._full) or (self.exp_every > 0 and step % self.exp_every == 0):
                return True
            if self._train_in_eval or self.sampling is not None or self._leaving:
                return True  # a train()-mode judgement waits for the next training forward
        except AttributeError:  # on_start did not finish (our bug, already reported): every step
            return True
        # An evaluation pass begins the step (the first module call runs without grad).
        return not torch.is_grad_enabled() or torch.is_inference_mode_enabled()

    def on_step_begin(self, step: int) -> None:
        if step != self._last_step + 1:
            self.zero = ZeroGradWatch()  # its samples are of a step before the gap
            self._averaged("gap")
        self._last_step = step
        self._in_root = 0
        self._offset_pending.clear()
        self._dense_pending = None
        self._step_losses.clear()
        self._drop_mask_follow()
        self._averaged("observe", step)
        self._eval_forwards.clear()
        self._backward_in_step = False
        self._scaled_read.clear()

    def on_root_forward_pre(self, model: nn.Module, label: str) -> None:
        self._in_root += 1
        if self._in_root == 1:
            self.states.before(model)
            chained = self.buffers.before(model)
            if chained is not None:
                self._add(buffer_finding(label, model, chained[0], chained[1], user_frame_from_stack(3), self._step))

    def on_exception(self, exc: BaseException) -> None:
        self._drop_mask_follow()
        self._in_root = 0  # (a forward that raised: no on_root_forward came)
        self._offset_pending.clear()

    def on_root_forward(self, model: nn.Module, label: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                        output: Any) -> None:
        self._in_root = max(0, self._in_root - 1)
        if not self._in_root:
            calls = self.states.after(model, args, kwargs)
            if calls is not None:
                self._add(state_finding(label, self.states.names(model), calls, user_frame_from_stack(3),
                                        self._step))
        if self._offset_pending and not self._in_root:
            self._offsets(args, kwargs)
        if self._dense_pending is not None and not self._in_root:
            tgt, frame, module, pred = self._dense_pending
            self._dense_pending = None
            self._pairing(tgt, args, kwargs, frame, module, pred)
        out = first_tensor(output)
        if out is not None and out.grad_fn is not None:
            self.kept.output(out, self._step, user_frame_from_stack(3) if self._warm() else None)
        if not self._backward_in_step:  # the step's autocast, for a replay of its forward
            self._autocast = [(d, torch.get_autocast_dtype(d)) for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)]
        grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        stochastic = self._stochastic_of(model)
        if stochastic and grad and not model.training and out is not None and out.requires_grad:
            self._eval_forwards.append((weakref.ref(model), label, user_frame_from_stack(3)))
        if grad and self._train_in_eval:
            self._judge_train_in_eval()  # training resumed: what did those forwards feed?
        if stochastic and not grad and model.training and not in_update_bn():
            key = id(model)
            _, frame, n, _, at = self._train_in_eval.get(key, (label, None, 0, stochastic, self._step))
            self._train_in_eval[key] = (label, frame or user_frame_from_stack(3), n + 1, stochastic, at)
            if self.sampling is None:
                self.sampling = TrainModeOutputs()
                self.sampling.enter()
            self.sampling.follow(key, output)
        if self._leaving:
            self._pop_left_modes()
        snap = self.session.snapshot
        if self._warm() and snap is not None and snap.record.ops:
            # the ops that made this call's inputs: integer data scaled for another type
            for plan, frame, op in int_scale_plans([o for o in snap.record.ops if o.before_step], self._scaled_read):
                self._queue([plan], frame=frame, op=op)
        if self._warm() and grad and self.region is None and out is not None and out.requires_grad \
                and snap is not None and snap.record.taped:
            self.region = LossRegion(snap.record)  # the loss code: the tape's ops from here to backward

    def _side_call(self, model: nn.Module, path: str, output: Any) -> None:
        """A stochastic module of `model` ran in train() mode without grad outside any root call
        (`model.generate(x)` under no_grad): an evaluation through another method than forward,
        followed like a no-grad train-mode root forward."""
        if self._in_root or in_update_bn():
            return
        key = id(model)
        label = self.session.model_label(model) or type(model).__name__
        entry = self._train_in_eval.get(key)
        if entry is None:
            entry = (label, self.sides.caller(model), 0, self._stochastic_of(model), self._step)
            self._side_first[key] = path
        if self._side_first.get(key, path) == path:  # one count per pass through the model
            entry = (*entry[:2], entry[2] + 1, *entry[3:])
        self._train_in_eval[key] = entry
        if self.sampling is None:
            self.sampling = TrainModeOutputs()
            self.sampling.enter()
        self.sampling.follow(key, output)

    def _terminal(self) -> None:
        try:
            for f in self.terminal.look(sys._getframe(2), self._step):
                self._add(f)
        except Exception as e:  # our bug: the user's step goes on
            self.terminal.analysed.clear()
            self.session.internal_error("silent.terminal_masks", e)

    def on_loss(self, call: LossCall) -> None:
        self._terminal()
        try:
            self.live_targets.loss(call.name, call.input, call.target, call.frame, self._step)
        except Exception as e:  # our bug: the run goes on
            self.session.internal_error("silent.live_targets", e)
        out = call.output
        if isinstance(out, torch.Tensor):
            self.graphs.mark(out, self._step, call.frame)
        self._follow_token_mask(call)
        self._dense_target(call)
        self._noise_target(call)
        self._graph_rows(call)
        if isinstance(out, torch.Tensor) and out.numel() == 1 and out.requires_grad and len(self._step_losses) < 8:
            self._step_losses.append((out, call.input, call.target, call.frame))
        if self._warm():
            self._warm_sites.add(call.frame)
        elif not self._new_loss_site(call):
            self._late_broadcast(call)
            return
        inp, tgt, kw = call.input, call.target, call.kwargs
        if not isinstance(inp, torch.Tensor) or not isinstance(tgt, torch.Tensor):
            return
        with torch.no_grad():
            if call.name in ELEMENTWISE_LOSSES:
                self._builtin_broadcast(call)
            plans = loss_plans(call.name, inp, tgt, kw)
            snap = self.session.snapshot
            if self._in_root:
                # A loss computed inside the model's forward (an HF model given `labels=`): the
                # snapshot holds the step's first call that returned, not this one (an earlier
                # batch of an evaluation pass, or none yet): its tokens are not this target's.
                snap = None
            ids = snap.args[0] if snap is not None and snap.args else (snap.kwargs.get("input_ids") if snap else None)
            if call.name in ("cross_entropy", "nll_loss") and is_index_tensor(tgt):
                if self._in_root and len(self._offset_pending) < 4:  # its ids are the root call's (`_offsets`)
                    self._offset_pending.append((tgt, call.frame, call.name, call.module, kw.get("ignore_index", -100)))
                else:
                    plans += offset_plans(tgt, ids, ignore_index=kw.get("ignore_index", -100), loss=call.name)
                mask = snap.kwargs.get("attention_mask") if snap is not None else None
                plans += token_plans(tgt, ids, ignore_index=kw.get("ignore_index", -100),
                                     reduction=kw.get("reduction", "mean"), attention_mask=mask,
                                     weighted=kw.get("weight") is not None, second=_second_tokens(snap, ids, tgt),
                                     loss=call.name)
                whole = probe_call(snap, ids) if plans else None
            else:
                whole = None
            plans += self._target_in_input_plans(ids, tgt)
            if snap is not None:
                padded = position_loss_plan(call.name, inp, call.option("reduction", "mean"),
                                            call.option("weight") is not None, snap.record.calls)
                plans += [padded] if padded is not None else []
            if call.name == "cross_entropy" and is_index_tensor(tgt) and self._warm():
                # on a taped step (the line that made the pairs), else on the warm-up's last
                rec = self.session.snapshot.record if self.session.snapshot is not None else None
                if rec is not None and (rec.taped or self._step >= self.warmup - 1):
                    plans += self_pair_plans(inp, tgt, call.option("ignore_index", -100), rec, self._pairs_seen)
        self._queue(plans, frame=call.frame, op=call.name, module=call.module, inp=inp, whole=whole)

    def _offsets(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The token losses computed inside the root forward that just returned, against the
        token ids it was called with: the offset of their targets (`_offset.py`)."""
        pending, self._offset_pending = self._offset_pending, []
        ids = args[0] if args and is_index_tensor(args[0]) else kwargs.get("input_ids")
        with torch.no_grad():
            for tgt, frame, name, module, ignore in pending:
                self._queue(offset_plans(tgt, ids, ignore_index=ignore, loss=name), frame=frame, op=name,
                            module=module)

    def _graph_rows(self, call: LossCall) -> None:
        """A training loss on rows selected from the model's output by a mask, against the nodes
        of the graph of the step's model call, on the warm-up steps (`_graphrows.py`)."""
        snap = self.session.snapshot
        if not (self._warm() or self.graph_rows.wants(call.frame, self._step)) or self._in_root \
                or not torch.is_grad_enabled() or snap is None or not snap.record.taped or not snap.record.calls \
                or not isinstance(call.input, torch.Tensor):
            return
        last = snap.record.calls[-1]
        with torch.no_grad():
            plan = self.graph_rows.plan(snap.record.ops, call.input, last.args, last.kwargs, call.frame)
        if plan is not None:
            self._queue([plan], frame=call.frame, op=call.name, module=call.module)
        keeper: Any = self.session.checker("snapshot")
        if keeper is not None and self.graph_rows.wants(call.frame, self._step + 1):
            keeper.hold_tape(self._step + 2)  # the next step's graph, to compare with

    def _noise_target(self, call: LossCall) -> None:
        """A training loss's target whose rows were overwritten with random noise on the tape
        before the model call, on the warm-up steps (`_noisetarget.py`)."""
        snap = self.session.snapshot
        if not self._warm() or not torch.is_grad_enabled() or snap is None or not snap.record.taped \
                or ("noise_target", call.frame) in self._reported:
            return
        tgt = call.target
        if call.name in ELEMENTWISE_LOSSES and isinstance(tgt, torch.Tensor) and tgt.requires_grad \
                and isinstance(call.input, torch.Tensor) and not call.input.requires_grad:
            tgt = call.input  # a symmetric loss given (target, prediction)
        plan = noise_rows_plan(snap.record.ops, tgt)
        if plan is None:
            return
        key, step, frame = ("noise_target", call.frame), self._step, call.frame

        def done(vals: list[float]) -> None:
            v = plan.decide(vals)
            if v is not None and key not in self._reported:
                self._reported.add(key)
                self._add(verdict_to_finding(v, frame=frame, step=step, op=v.get("op"), module=call.module))

        self.flags.add(plan.values, done)

    def _dense_target(self, call: LossCall) -> None:
        """A training loss whose target is dense (a mask, a depth map, an image) on the warm-up
        steps: does it line up with the model's input (`_pairing.py`)? A loss computed inside
        the model's forward waits for that call's end (its arguments)."""
        tgt = call.target
        if not self._warm() or not torch.is_grad_enabled() or torch.is_inference_mode_enabled() \
                or not is_dense_target(tgt) or self._dense.get(call.frame, 0) >= self.warmup or len(self._dense) > 16:
            return
        if self._in_root:
            if self._dense_pending is None:
                self._dense_pending = (tgt, call.frame, call.module, call.input)
            return
        snap = self.session.snapshot
        if snap is not None and snap.record.calls:
            last = snap.record.calls[-1]  # the model call that made the prediction
            self._pairing(tgt, last.args, last.kwargs, call.frame, call.module, call.input)

    def _pairing(self, tgt: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any], frame: Any,
                 module: str | None, pred: Any = None) -> None:
        x = dense_input(tgt, args, kwargs, pred)
        if x is None:
            return
        self._dense[frame] = self._dense.get(frame, 0) + 1
        try:
            with self.session.paused(), own_modes_off(), torch.no_grad():
                plan = misaligned_plan(x, tgt)
        except Exception as e:  # our bug: the user's step goes on
            self.session.internal_error("data.target_misaligned", e)
            return
        if plan is not None:
            key = ("misaligned", frame)
            step = self._step

            def done(vals: list[float]) -> None:
                v = plan.decide(vals)
                if v is not None and key not in self._reported:
                    self._reported.add(key)
                    self._add(verdict_to_finding(v, frame=frame, step=step, op=None, module=module))

            self.flags.add(plan.values, done)

    def _follow_token_mask(self, call: LossCall) -> None:
        """A per-token next-token loss (`reduction="none"`, targets shaped like the loss) of a
        model called with an attention mask: follow its output to the `loss * mask` that masks
        it by hand (`_target_mask.py`); the first calls of each line, training or evaluation."""
        self._drop_mask_follow()
        tgt, out = call.target, call.output
        if call.name not in ("cross_entropy", "nll_loss") or call.option("reduction") != "none" \
                or not isinstance(out, torch.Tensor) or not isinstance(tgt, torch.Tensor) \
                or not is_index_tensor(tgt) or tgt.dim() != 2 or tuple(out.shape) != tuple(tgt.shape):
            return
        n = self._mask_sites.get(call.frame, 0)
        snap = self.session.snapshot
        if n >= max(1, self.warmup) or len(self._mask_sites) > 64 or snap is None or not snap.record.calls:
            return
        last = snap.record.calls[-1]  # the model call that made these logits
        ids = last.args[0] if last.args else last.kwargs.get("input_ids")
        am = last.kwargs.get("attention_mask")
        if not isinstance(ids, torch.Tensor) or not isinstance(am, torch.Tensor) or ids.dim() != 2 \
                or tuple(am.shape) != tuple(ids.shape) or ids.shape[0] != tgt.shape[0] or ids.device != tgt.device:
            return
        shift = ids.shape[1] - tgt.shape[1]
        if not 1 <= shift <= 2:
            return
        self._mask_sites[call.frame] = n + 1
        target, at = tgt, call.frame  # (not `call`: its output holds the step's graph)

        def found(mask: torch.Tensor, frame: Any) -> None:
            try:  # (inside the user's op: our arithmetic is not the step's, no mode records it)
                with self.session.paused(), own_modes_off():
                    plan = mask_plan(mask, target, ids, am, shift)
                self._queue([plan], frame=frame or at, op="mul")
            except Exception as e:
                self.session.internal_error("silent.loss_mask_on_inputs", e)

        session = self.session
        self._mask_follow = MaskFollow(out, found, lambda: session.busy or session.in_event)
        self._mask_follow.enter()

    def _drop_mask_follow(self) -> None:
        """Take the mask follower off the stack; one inside its own op (this event runs inside
        `loss.backward()` or the next loss call) is taken off at a later event."""
        if self._mask_follow is not None:
            self._mask_leaving.append(self._mask_follow)
            self._mask_follow = None
        if self._mask_leaving:
            self._mask_leaving = [m for m in self._mask_leaving if not m.leave()]

    def _new_loss_site(self, call: LossCall) -> bool:
        """A training loss line first called after the warm-up (a second phase: distillation
        after a teacher's training, fine-tuning after pre-training) gets its own warm-up: the
        input semantics hold for every loss line, not only those of the run's first steps."""
        if not torch.is_grad_enabled() or torch.is_inference_mode_enabled() or call.frame is None:
            return False
        seen = self._late_sites.get(call.frame)
        if seen is None:
            if len(self._late_sites) >= 64 or call.frame in self._warm_sites:
                return False
            seen = 0
        if seen >= self.warmup:
            return False
        self._late_sites[call.frame] = seen + 1
        return True

    def _late_broadcast(self, call: LossCall) -> None:
        """The shapes of an elementwise loss line not checked otherwise (an evaluation's, under
        no_grad, whose number picks the best trial): its first call, shapes only unless they grow."""
        if call.name not in ELEMENTWISE_LOSSES or call.frame is None or call.frame in self._shape_sites \
                or len(self._shape_sites) >= 64:
            return
        self._shape_sites.add(call.frame)
        if isinstance(call.input, torch.Tensor) and isinstance(call.target, torch.Tensor):
            with torch.no_grad():
                self._builtin_broadcast(call)

    def _builtin_broadcast(self, call: LossCall) -> None:
        ps, ts = shape(call.input), shape(call.target)
        result = grows(ps, ts)
        if result is None:
            return
        key = ("broadcast", call.name, call.frame)
        computed = fixed = None
        if key not in self._reported:  # the numbers cost a sync: once per place
            self._reported.add(key)
            import torch.nn.functional as F

            out = call.output
            computed = float(out) if isinstance(out, torch.Tensor) and out.numel() == 1 else None
            pair = aligned(call.input, call.target)
            if pair is not None and computed is not None:
                with self.session.paused():
                    fixed = float(getattr(F, call.name)(*pair, *call.args[2:], **call.kwargs))
        self._add(broadcast_finding(op=call.name, prediction_shape=ps, target_shape=ts, result_shape=result,
                                    computed=computed, fixed=fixed, frame=call.frame, module=call.module,
                                    step=self._step))

    def _target_in_input_plans(self, x: Any, tgt: torch.Tensor) -> list[Plan]:
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 2 or x.shape[0] < 8:
            return []
        n = x.shape[0]
        if tgt.numel() != n or tgt.device != x.device or tgt.dtype == torch.bool:
            return []
        diff = (x.detach().float() - tgt.detach().float().reshape(n, 1)).abs().amax(dim=0)
        spread = (tgt.detach().float().amax() - tgt.detach().float().amin())

        def judge(v: list[float]) -> dict[str, Any] | None:
            best, col, sp = v
            # (`not <=`: a NaN in the batch makes every difference NaN, which matches nothing)
            if not best <= 1e-6 * max(1.0, sp) or not sp > 0:
                return None
            return dict(name="target_in_input", family="data", severity=Severity.ERROR, stage=Stage.DATA,
                        column=int(col),
                        evidence={"input_shape": shape(x), "target_shape": shape(tgt), "matching_column": int(col),
                                  "max_abs_difference": best})

        return [Plan([diff.amin(), diff.argmin(), spread], judge)]

    def on_backward(self, roots: tuple[torch.Tensor, ...], grads: Any) -> None:
        self._terminal()
        self._drop_mask_follow()
        if self.averaged.pairs:
            self._averaged("mark", False)
        self._backward_in_step = True
        self.states.reset()
        if self._train_in_eval:
            if self.sampling is not None:
                # a no-grad forward whose outputs made the loss given to backward() was the
                # training forward (cut: the gradient check says so), not an evaluation
                for key in self.sampling.keys_of(roots):
                    self._train_in_eval.pop(key, None)
            self._judge_train_in_eval()
        self._pop_left_modes()
        root = roots[0] if roots and isinstance(roots[0], torch.Tensor) else None
        frame = None
        if self.zero.armed:
            for sample in self.zero.backward_begins():
                # The last backward before that optimizer's step is the line to fix: in a GAN,
                # D's own backward, not G's backward that also adds into D's grads.
                frame = frame or user_frame_from_stack(3)
                sample.frame, sample.step = frame, self._step
        if root is None:
            return
        if root.grad_fn is not None:
            if frame is None:
                frame = user_frame_from_stack(3)
            self.graphs.mark(root, self._step, frame)
            self._loss_frame = self._loss_frame or frame
            if self._warm():
                snap = self.session.snapshot
                grown = self.carry.backward(roots, call_path(user_stack_frame(2)) if frame else None,
                                            snap.record if snap is not None else None)
                if grown is not None:
                    self._add(carried_finding(grown, frame, self._step))
        self._mixed_labels()
        if self._warm() and (snap := self.session.snapshot) is not None:
            self._division_plans(snap.record.ops, root)
            self._batch_twice(snap, root)
            self._softmax_checks(root, snap)
            self._opposed(snap)
        exp_sites = list(self.region.exp_sites) if self.region is not None else []
        if self.region is not None:
            self._analyze_region(root)
        if root.numel() == 1 and self._step < self.collapse_steps and len(self._losses) == self._step:
            self._losses.append(root.detach().reshape(()))
            if len(self._losses) == self.collapse_steps:
                self._queue_collapse()  # queued before optimizer.step(): read with the step's read
        if self._warm() or (self.exp_every > 0 and self._step % self.exp_every == 0):
            self._exp_plans(root, exp_sites)

    def _mixed_labels(self) -> None:
        """Two losses on one prediction with different targets (a mixed label): on a taped step,
        the label weights against the pixels pasted (`_mixweight.py`); on a later step, the tape
        is kept on for the next few steps (a loop that mixes some batches only)."""
        losses, self._step_losses = self._step_losses, []
        if len(losses) < 2 or not any(a[1] is b[1] and a[2] is not b[2] for a in losses for b in losses):
            return
        snap = self.session.snapshot
        frame = next((f for _, _, _, f in losses if f is not None), None)
        if snap is None or frame in self._mix_judged:
            return
        if not snap.record.taped:
            hold = getattr(self.session.checker("snapshot"), "hold_tape", None)  # the snapshot keeper's
            if hold is not None and self._mix_holds < 2:
                self._mix_holds += 1
                hold(self._step + 6)
            return
        inputs = [t for c in snap.record.calls for t in (*c.args, *c.kwargs.values()) if isinstance(t, torch.Tensor)]
        v = mix_weight_verdict(snap.record.ops, inputs, losses)
        if v is None and len(self._mix_judged) < 64 and pasted_share(snap.record.ops, inputs) is None:
            self._mix_judged.add(frame)  # no paste on a taped step: no tape kept on for it later (mixup)
        key = ("mixweight", frame)
        if v is not None and key not in self._reported:
            self._reported.add(key)
            self._add(verdict_to_finding(v, frame=frame, step=self._step, op=None))

    def _division_plans(self, ops: list[Any], root: torch.Tensor) -> None:
        """The step's taped divisions that feed this loss, each judged once per step."""
        judged = self._divisions_seen if ops and id(ops[0]) in self._divisions_seen else set()
        self._divisions_seen = {id(op) for op in ops}
        for plan, frame in division_plans(ops, root, judged):
            self._queue([plan], frame=frame, op="div")
        for plan, frame in clamp_plans(ops, root, judged):
            self._queue([plan], frame=frame, op="clamp")
        for plan, frame in padmean_plans(ops, root, judged):
            self._queue([plan], frame=frame, op="mean")

    def _batch_twice(self, snap: Any, root: torch.Tensor) -> None:
        """A term of this loss divided by the batch size once too often (`_batchtwice`), one
        finding per line."""
        for plan, frame in twice_plans(snap.record.ops, root, batch_of(snap.record.calls)):
            key = ("batch_twice", frame)
            if key not in self._reported:
                self._reported.add(key)
                self._queue([plan], frame=frame, op="div")

    def _opposed(self, snap: Any) -> None:
        """Equal rows of two inputs that one set of weights saw in this step, trained toward opposite
        targets (`_opposed`): gradient hooks on the outputs, removed at the backward's end."""
        try:
            self._opposed_probes(snap)
        except Exception as e:  # our bug: warn once, never the user's step
            self._remove_probes()
            self.session.internal_error("data.opposite_targets", e)

    def _opposed_probes(self, snap: Any) -> None:
        found = uses(snap.record.ops, snap.record.calls, first_tensor, self.session.param_index.info)
        for a, b in pairs(found):
            key = ("opposed", b.frame.file, b.frame.line) if b.frame is not None else ("opposed", a.key)
            if key in self._reported:
                continue
            probe = Probe(a, b)
            self._probes.append(probe)
            plan, step = probe.plan(), self._step

            def done(vals: list[float], plan: Plan = plan, use: Any = b, key: Any = key, step: int = step) -> None:
                v = plan.decide(vals)
                if v is not None and key not in self._reported:
                    self._reported.add(key)
                    self._add(verdict_to_finding(v, frame=use.frame, step=step, op=use.op))

            self.flags.add(plan.values, done)

    def _softmax_checks(self, root: torch.Tensor, snap: Any) -> None:
        """Softmax nodes of this loss's graph over a size-1 axis, or over another axis than the
        one the next matmul contracts (`_softmax_axis`)."""
        soft, mats = walk(root.grad_fn)
        if not soft:
            return
        skip = root_output_nodes(snap.record.calls)
        for node, v in singleton_verdicts(soft, skip):
            self._node_verdict(signature(node), v)
        for node, plan in axis_plans(mats, skip):
            want = signature(node)

            def done(vals: list[float], plan: Plan = plan, want: Any = want) -> None:
                v = plan.decide(vals)
                if v is not None:
                    self._node_verdict(want, v)
            self.flags.add(plan.values, done)

    def _node_verdict(self, want: Any, v: dict[str, Any]) -> None:
        """A verdict on a node inside the model: its module and line from one replay per site."""
        if want is None:
            return
        key = ("node", v["name"], want)
        if key not in self._sites:
            self._sites[key] = (locate(self.session, want, self._autocast), None)
        site = self._sites[key][0]
        frame = site.frame if site is not None else self._loss_frame
        ev = dict(v.get("evidence") or {})
        if site is not None:
            ev["made_by"] = f"{site.func} ({site.module or '<root>'})"
        f = verdict_to_finding(dict(v, evidence=ev), frame=frame, step=self._step,
                               module=site.module if site is not None else None)
        if v["name"] == "softmax_not_contracted_axis":
            self._held_axis.append(f)  # judged at the end beside a causal leak the same line makes
            return
        self._add(f)

    def _add_held_axis(self) -> None:
        """A softmax over the wrong axis of a masked attention is also why it sees the future:
        where the causal probe already reported that error at the same line, the axis finding is
        its explanation (an info beside it), not a second problem."""
        leaks = {(g.file, g.line) for g in self.session.findings if g.code == "silent.attention_sees_future"}
        for f in self._held_axis:
            self._add(f.replace(severity=Severity.INFO) if (f.file, f.line) in leaks else f)
        self._held_axis = []

    def _analyze_region(self, root: torch.Tensor) -> None:
        region = self.region
        assert region is not None
        for s in list(region.suspects):
            if not region.reaches(s, root):
                continue
            key = ("region", s.op, s.frame)
            computed = fixed = None
            if key not in self._reported and root.numel() == 1:
                self._reported.add(key)
                with self.session.paused():
                    computed = float(root.detach())
                    fixed = region.replay(s, root)
            grad_lo = s.lo.requires_grad and not s.hi.requires_grad
            pred, tgt = (s.lo, s.hi) if grad_lo else (s.hi, s.lo)
            paired = s.kind == "paired"
            self._add(broadcast_finding(op=s.op, prediction_shape=shape(pred), target_shape=shape(tgt),
                                        result_shape=s.result_shape, computed=computed, fixed=fixed,
                                        frame=s.frame, step=self._step, paired=paired, select=s.kind == "select",
                                        severity=Severity.WARNING if paired else Severity.ERROR))
        self._leave_region()

    def _exp_plans(self, root: torch.Tensor, sites: list[tuple[int, Any]]) -> None:
        step = self._step
        for node, consumer in exp_nodes(root):
            try:
                r = node._saved_result
            except RuntimeError:
                continue
            if not isinstance(r, torch.Tensor) or not r.is_floating_point() or r.numel() == 0:
                continue
            n = r.shape[-1] if r.dim() else 1
            storage = storage_of(r)
            frame = next((f for s, f in sites if s == storage and storage), None)

            def done(vals: list[float], dtype: torch.dtype = r.dtype, n: int = n, consumer: str = consumer,
                     shape: tuple[int, ...] = tuple(r.shape), frame: Any = frame) -> None:
                stage = Stage.FORWARD if frame is None else Stage.LOSS  # seen by the loss region: loss code
                top = vals[0]
                x_max = math.log(top) if 0 < top < math.inf else (math.inf if top == math.inf else None)
                if x_max is None:
                    return
                if x_max == math.inf and self.session.checker("nonfinite") is not None:
                    return  # exp already gave Inf: the non-finite sentinel reports it, with op, module and line
                v = overflow_verdict(x_max, dtype, n, None)
                if v is None:
                    return
                module = None
                if frame is None:
                    frame, module = self._exp_site(shape, dtype)
                ev = dict(v, consumer=consumer.replace("Backward0", "") or "loss")
                self._add(finding("exp_overflow", severity=Severity.ERROR if x_max == math.inf else Severity.WARNING,
                                  stage=stage, op="exp", step=step, evidence=ev, frame=frame, module=module,
                                  variant="over" if v["room"] < 0 else None, **v))

            self.flags.add([r.detach().amax()], done)

    def _exp_site(self, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[Any, str | None]:
        """The line and module of a forward exp of this shape (a replay, once per shape and dtype)."""
        key = ("exp_site", shape, dtype)
        if key not in self._sites:
            self._sites[key] = locate_in_forward(self.session, shape, dtype, self._autocast)
        return self._sites[key]

    def _param_name(self, p: torch.Tensor) -> str | None:
        return self.session.param_index.name(p)

    def on_optimizer_step_pre(self, optimizer: torch.optim.Optimizer) -> None:
        if not self.averaged.scanned:
            self._averaged("first_step")
        if self.averaged.pairs:
            self._averaged("mark", True)
        stale = self.zero.stepping(optimizer)
        if stale is not None:
            p, sample = stale
            # a gradient-hygiene fault whichever check sees it (`gradient.zero_grad_missing` is
            # the same finding when `silent` is not running): category gradient
            self._add(finding("zero_grad_missing", stage=Stage.BACKWARD, frame=sample.frame,
                              category=Category.GRADIENT,
                              parameter=self._param_name(p) if p is not None else None,
                              step=sample.step, op="backward",
                              evidence={"parameters_sampled": len(sample.grads),
                                        "grads_not_reset_since_last_step": True}))
        if self.region is not None:
            self._leave_region()
        if not self._eval_forwards:
            return
        params = {id(p) for g in optimizer.param_groups for p in g["params"]}
        for mref, label, frame in self._eval_forwards:
            model = mref()
            if model is None or model.training:
                continue
            if any(id(p) in params and p.grad is not None for p in model.parameters()):
                affected = trainable_stochastic_modules(model)
                if not affected:  # dropout / batch norm only in frozen parts: eval() is right there
                    continue
                self._add(finding("eval_mode_while_training", severity=Severity.WARNING, stage=Stage.FORWARD,
                                  frame=frame, module="", op=type(model).__name__, step=self._step, model=label,
                                  evidence={"modules_affected": affected[:6]}))
        self._eval_forwards.clear()

    def _remove_probes(self) -> None:
        for probe in self._probes:
            probe.remove()
        self._probes = []

    def on_backward_end(self, roots: tuple[torch.Tensor, ...]) -> None:
        self._remove_probes()
        if getattr(self.session, "backward_create_graph", False):
            try:
                params = {id(p) for m in self.session.models for p in m.parameters()}
                params |= {id(p) for o in self.session.optimizers for g in o.param_groups for p in g["params"]}
                self.kept.backward_done(roots, self._step, user_frame_from_stack(3), params)
            except Exception as e:  # our bug: the user's step goes on
                self.session.internal_error("silent.grad_graph_kept", e)
        if self.zero.armed:
            self.zero.backward_ends()

    def on_optimizer_step_post(self, optimizer: torch.optim.Optimizer) -> None:
        self.zero.after_step(optimizer)

    def _judge_train_in_eval(self) -> None:
        """No-grad forwards in train() mode are evaluation only when their outputs fed an
        evaluation loss or a metric (issue 13); a sample grid or a target feeds neither."""
        pending, self._train_in_eval = self._train_in_eval, {}
        sampling, self.sampling = self.sampling, None
        fed = dict(sampling.fed) if sampling is not None else {}
        if sampling is not None and not sampling.leave():
            self._leaving.append(sampling)  # popped once torch hands the stack back
        for key, (label, frame, n, modules, step) in pending.items():
            if key not in fed:
                continue
            kind, _, op = fed[key].partition(":")
            self._add(finding("train_mode_while_evaluating", severity=Severity.WARNING, stage=Stage.FORWARD,
                              frame=frame, module="", model=label, step=step,
                              evidence={"no_grad_forwards_in_train_mode": n, "outputs_fed": f"{kind} {op}",
                                        "modules_affected": modules[:6]}))

    def on_step_end(self, step: int) -> None:
        self._remove_probes()  # a backward that raised never reached on_backward_end
        self._leave_region()
        if self._leaving:
            self._pop_left_modes()
        self.flags.resolve()
        snap = self.session.snapshot
        if self._warm() and snap is not None and snap.record.ops:
            self.graphs.mark_holders(snap.record.ops)  # the taped ops on a loss (`total += loss`)
            self.kept.outputs.mark_holders(snap.record.ops)  # and on a model output (a metric's)
        old = self.graphs.alive_before(step)
        # Evidence of an accumulator (`total += loss`, `losses.append(loss)`): one line's loss
        # graphs from two or more earlier steps still alive, so their number grows with the
        # steps. Losses that live until the next iteration reassigns them (a GAN's
        # errD = errD_real + errD_fake, with one step per backward) keep one graph per line.
        # A warning (issue 13): the numbers are right, the run wastes memory until it runs out.
        by_line: dict[Any, list[tuple[int, Any]]] = {}
        for s, f in old:
            by_line.setdefault((getattr(f, "file", None), getattr(f, "line", None)), []).append((s, f))
        kept = next((v for v in by_line.values() if len({s for s, _ in v}) >= 2), None)
        if kept is not None:
            old = kept
            frame = old[0][1]
            ev: dict[str, Any] = {"old_loss_graphs_alive": len(old), "from_steps": sorted({s for s, _ in old})[:8]}
            holder = self.graphs.holder_before(step)
            # the holders are marked on the warm-up steps only: a later epoch's accumulator
            # (reset, then `+=` again) is the same line as the one found then
            line = (getattr(frame, "file", None), getattr(frame, "line", None))
            holder = self._holders.setdefault(line, holder) if holder is not None else self._holders.get(line)
            if holder is not None:  # the line that keeps them (`total_loss += loss`), not the loss's
                if frame is not None:
                    ev["loss_made_at"] = f"{os.path.basename(frame.file)}:{frame.line}"
                frame = holder
            # A memory fault (the values are right): the category says what runs out.
            self._add(finding("loss_graph_kept", severity=Severity.WARNING, stage=Stage.LOSS, frame=frame, step=step,
                              evidence=ev, category=Category.MEMORY))
        outputs, grads = self.kept.verdicts(step)
        if grads is not None:
            self._add(kept_finding("grad", grads, step))
        if outputs is not None and kept is None:
            # (a kept loss is reported as that)
            self._add(kept_finding("outputs", outputs, step, self.kept.outputs.holder_before(step)))

    def _queue_collapse(self) -> None:
        losses, self._losses = self._losses, []
        if len(losses) >= 5:
            self.flags.add(losses, self._check_collapse)

    def _check_collapse(self, vals: list[float]) -> None:
        first = vals[0]
        if not (first > 0 and math.isfinite(first)):
            return
        if min(vals) < 0:  # a signed loss (a WGAN critic, a policy-gradient term): 0 is no floor
            return
        for k, v in enumerate(vals[1:], 1):
            # A collapse stays down; a loss that touches ~0 once and comes back (several
            # networks' losses on one step clock, a noisy objective) did not collapse.
            if 0 <= v <= first * 1e-3 and all(w <= first * 1e-2 for w in vals[k:]):
                # Harm (issue 24): a thousandfold fall within a few updates is faster than any
                # model learns from data (the answer is in its input); a small training set
                # memorised over more steps (a GNN on 150 graphs) is a run that learned: info.
                severity = Severity.WARNING if k <= _INSTANT else Severity.INFO
                self._add(finding("loss_collapse", severity=severity, stage=Stage.LOSS, frame=self._loss_frame,
                                  step=k, steps=k, evidence={"first_loss": fmt(first), f"loss_at_step_{k}": fmt(v),
                                                             "ratio": f"{v / first:.2e}"}))
                return

    def _averaged(self, event: str, *args: Any) -> None:
        """An event of the averaged-copies watch; its bug stops it, never the user's step."""
        try:
            getattr(self.averaged, event)(*args)
        except Exception as e:
            self.averaged.close()
            self.averaged.pairs.clear()
            self.session.internal_error("silent.averaged_copies", e)

    def _add_averaged(self) -> None:
        self._averaged("close")
        diverging = self.averaged.diverging()
        updated = self.averaged.updated()
        if diverging and len(diverging) * 2 >= len(updated):
            worst = max(diverging, key=lambda p: p.dists[-1] / p.dists[0])
            coeffs = sorted(c for p in diverging for c in p.coeffs)
            coeff = coeffs[len(coeffs) // 2]
            ev = {"copies_updated": len(updated),
                  "copies_moving_away": len(diverging), "update_coefficient_median": round(coeff, 6),
                  "update_coefficient_max": round(max(coeffs), 6), "parameter": worst.name,
                  "distance_first": fmt(worst.dists[0]), "distance_last": fmt(worst.dists[-1]),
                  "updates_measured": len(worst.coeffs), "copy": worst.holder}
            self._add(finding("ema_diverges", severity=Severity.WARNING, stage=Stage.OPTIMIZER,
                              frame=worst.frame, parameter=f"{worst.name} (shadow)", evidence=ev,
                              module=worst.holder, holder=worst.holder, param=worst.name, coeff=f"{coeff:.3g}",
                              first=fmt(worst.dists[0]), last=fmt(worst.dists[-1]),
                              updates=len(worst.coeffs)))
        fast = self.averaged.not_averaging()
        if fast and not diverging and len(fast) * 2 >= len(updated):
            worst = max(fast, key=lambda p: p.dists[-1] / max(p.norms[-1], 1e-30))
            late = [c for c, s in zip(worst.lows, worst.at) if s > _cadence.FULL]
            coeff = sorted(late)[len(late) // 2]
            rel = worst.dists[-1] / worst.norms[-1] if worst.norms[-1] > 0 else 0.0
            ev = {"copies_updated": len(updated), "copies_not_averaging": len(fast),
                  "update_coefficient_median": round(coeff, 6), "update_coefficient_min": round(min(late), 6),
                  "effective_decay": round(1 - coeff, 6), "updates_measured_after_warmup": len(late),
                  "first_step_measured": next(s for s in worst.at if s > _cadence.FULL),
                  "parameter": worst.name, "copy": worst.holder,
                  "relative_distance_to_parameter": fmt(rel),
                  "harm": f"the averaged copy {worst.holder} is within {rel:.2%} of the live weights: it averages "
                          f"over ~{1 / coeff:.1f} steps"}
            self._add(finding("ema_not_averaging", severity=Severity.WARNING, stage=Stage.OPTIMIZER,
                              frame=worst.frame, parameter=f"{worst.name} (shadow)", evidence=ev,
                              module=worst.holder, holder=worst.holder, param=worst.name, coeff=f"{coeff:.3g}",
                              decay=f"{1 - coeff:.3g}", horizon=f"{1 / coeff:.1f}", rel=f"{rel:.2%}",
                              updates=len(late), first=ev["first_step_measured"]))
        calls = self.averaged.calls.verdict()
        valued = self.averaged.valued()
        if calls is None and self.averaged.calls.followed is None and valued:
            calls = self.averaged.inline.verdict(valued[0].frame)
        if calls is not None:
            frame = calls.pop("frame")
            self._add(finding("ema_updated_between_steps", severity=Severity.WARNING, stage=Stage.OPTIMIZER,
                              frame=frame, module=calls["copy"], op=calls["update"], evidence=calls,
                              update=calls["update"], copy=calls["copy"], calls=calls["calls"],
                              steps=calls["optimizer_steps"], per=f"{calls['calls_per_step']:.2g}",
                              idle=calls["calls_without_a_step_since_the_last"]))
        by_update: dict[Any, list[dict[str, Any]]] = {}  # one finding per update line: a copy's norm layers
        for st in self.averaged.stale:
            fr = st["pair"].frame
            by_update.setdefault((fr.file, fr.line) if fr is not None else st["module"], []).append(st)
        for group in by_update.values():
            st = group[0]
            pair = st["pair"]
            n = st["example"]
            ev = {"copy_module": st["module"], "copy_modules_stale": [g["module"] for g in group][:8],
                  "buffers": st["buffers"], f"copy_{n}_mean": st["copy_value"],
                  f"source_{n}_mean": st["source_value"], "buffers_at_initial_values": True,
                  "evaluated_in_eval_mode": True, "copy_parameter_updates_measured": len(pair.coeffs),
                  "copy_parameter": pair.holder}
            if st["frame"] is not None:
                ev["evaluated_at"] = f"{os.path.basename(st['frame'].file)}:{st['frame'].line}"
            self._add(finding("ema_buffers_stale", severity=Severity.WARNING, stage=Stage.OPTIMIZER,
                              frame=pair.frame or st["frame"], module=st["module"],
                              parameter=f"{st['module']}.{st['example']}" if st["module"] else st["example"],
                              evidence=ev, copy=st["module"], buffers=", ".join(st["buffers"]), example=st["example"],
                              copy_value=st["copy_value"], source_value=st["source_value"]))
        self.averaged.stale.clear()
        for fr in unsynced_copies(self.averaged.pairs, self.averaged.names, self.averaged.used):
            sib = fr["sibling_pair"]
            ev = {"copy": fr["copy"], "model": fr["model"], "distance_at_first_step": fmt(fr["distance_start"]),
                  "model_norm": fmt(fr["model_norm"]),
                  "relative_distance": fmt(fr["distance_start"] / fr["model_norm"]),
                  "update_coefficient_median": round(fr["coefficient"], 6),
                  f"distance_at_step_{fr['first_step']}": fmt(fr["distance_first"]),
                  f"distance_at_step_{fr['last_step']}": fmt(fr["distance_last"]),
                  "sibling_copy": fr["sibling_copy"], "sibling_model": fr["sibling_model"],
                  "sibling_started_equal": True}
            first = fr["pairs"][0].frame
            if first is not None:
                ev["copy_updated_at"] = f"{os.path.basename(first.file)}:{first.line}"
            if sib.frame is not None:
                ev["sibling_updated_at"] = f"{os.path.basename(sib.frame.file)}:{sib.frame.line}"
            used = fr["used_at"]
            ev["copy_used_at"] = f"{os.path.basename(used.file)}:{used.line}"
            self._add(finding("target_copy_unsynced", severity=Severity.WARNING, stage=Stage.OPTIMIZER,
                              frame=used, module=fr["copy"], evidence=ev, copy=fr["copy"], model=fr["model"],
                              start=ev["distance_at_first_step"], norm=ev["model_norm"],
                              coeff=f"{fr['coefficient']:.3g}", sibling=fr["sibling_copy"],
                              sibling_model=fr["sibling_model"]))
        for fr in frozen_copies(self.averaged.pairs, self.averaged.names, self.averaged.used,
                                self.averaged.unchanged):
            sib = fr["sibling_pair"]
            ev = {"copy": fr["copy"], "model": fr["model"], "copy_updates_measured": 0,
                  "copy_readings_unmoved": min(p.still for p in fr["pairs"]),
                  "distance_first": fmt(fr["distance_first"]), "distance_last": fmt(fr["distance_last"]),
                  "model_norm": fmt(fr["model_norm"]), "steps": [fr["first_step"], fr["last_step"]],
                  "sibling_copy": fr["sibling_copy"], "sibling_model": fr["sibling_model"],
                  "sibling_updates_measured": len(sib.coeffs),
                  "sibling_update_coefficient_median": round(sorted(sib.coeffs)[len(sib.coeffs) // 2], 6)}
            if sib.frame is not None:
                ev["sibling_updated_at"] = f"{os.path.basename(sib.frame.file)}:{sib.frame.line}"
            used = fr["used_at"]
            if used is not None:
                ev["copy_used_at"] = f"{os.path.basename(used.file)}:{used.line}"
            self._add(finding("target_copy_frozen", severity=Severity.WARNING, stage=Stage.OPTIMIZER,
                              frame=used or sib.frame, module=fr["copy"], evidence=ev, copy=fr["copy"],
                              model=fr["model"], first=ev["distance_first"], last=ev["distance_last"],
                              norm=ev["model_norm"], sibling=fr["sibling_copy"], sibling_model=fr["sibling_model"],
                              readings=fr["readings"]))

    def on_end(self) -> None:
        self._remove_probes()
        self.pads.close()
        self.pad_values.close()
        self.sides.close()
        self.layouts.close()
        self._drop_mask_follow()
        for f in self._mask_leaving:  # at close no op of ours is running: take them off
            f.inside = 0
        self._drop_mask_follow()
        self._add_averaged()
        self.metric_states.close()
        for stale in self.metric_states.findings(self._step):
            self._add(stale)
        self._leave_region()
        if self._losses:
            self._queue_collapse()
        self.flags.resolve()
        _deferred.leave(self.session, self.flags)
        for target in self.live_targets.findings():
            self._add(target)
        self._add_held_axis()
        self._judge_train_in_eval()
        for m in self._leaving:  # at close no call of ours is running: take them off
            m.inside = 0
        self._pop_left_modes()


_INSTANT = 5  # updates within which a loss that collapses had the answer in its input


def _second_tokens(snap: Any, ids: Any, target: Any = None) -> Any:
    """A decoder's input (`decoder_input_ids=`, or a later positional integer tensor shaped
    like `ids`) the root model was called with, or None. Not the loss target itself: a model
    called as `model(x, targets)` computes its loss inside forward from that argument."""
    if snap is None or not isinstance(ids, torch.Tensor):
        return None
    dec = snap.kwargs.get("decoder_input_ids")
    if isinstance(dec, torch.Tensor):
        return dec
    for a in reversed(snap.args[1:]):
        if isinstance(a, torch.Tensor) and a.shape == ids.shape and not a.is_floating_point() and a.dtype != torch.bool:
            return None if isinstance(target, torch.Tensor) and same_storage(a, target) else a
    return None


