"""Writes to the gradients that no optimizer step reads.

Every in-place change a program makes to `.grad` (a clip, a scale, a mask) exists to change the
update: it must come after the `backward()` that made those gradients and before the
`optimizer.step()` that applies them. A write made after a step, to the gradients that step
already applied, and then thrown away by `zero_grad()` changed nothing: a gradient clip written
by hand (or a `clip_grad_norm_` imported before the session) inside a LightningModule's
`training_step`, which Lightning runs before it zeroes the gradients and calls backward, clips
the previous step's gradients; the step it meant to clip runs unclipped.

Seen by the tensors' version counters (no device read, no torch-function mode): after an
optimizer step on the sampled steps (`_cadence`), the version of up to MAX_TRACKED of its
gradients; at the next `zero_grad()` of that optimizer (wrapped for the session), a gradient
whose version moved was written in between, provided no backward ran in between (autograd
accumulates into an existing `.grad` in place: a GAN's generator loss reaching the
discriminator's gradients, zeroed at the next iteration, is no write of the program's). A write
that only zeroed them (`p.grad.zero_()` before `zero_grad()`) is no clip: one read then, of the
largest written element. Reported from the second step that shows it.

A write is a fault only when it changed the numbers: the largest magnitude of each followed
gradient is taken (on the device, no read) when the step has applied them, and compared at
`zero_grad()`; a clip under its threshold scales by 1 and changes nothing, so a misplaced clip
that never acted harmed nothing on this run. A write that the clip-order watch (`_order`) saw
made by `clip_grad_norm_` is that watch's finding (it names the clip's line), not this one's.
The finding carries the line of the `zero_grad()` that discarded the writes (the innermost
frame of the user's code that called it), and it is a trend judged by the loss (`_harm`): a
warning only when the loss did not fall after it.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

from .._distributed._shards import local_shards
from .._findings import Category, Finding, Stage
from .._frames import UserFrame, find_frame, in_user_file, user_frame_of
from .._zerograd import on_zero_grad
from ._common import finding, num

MAX_TRACKED = 16  # gradients followed per optimizer
MIN_STEPS = 2  # steps whose writes were discarded before the finding


class GradWrites:
    def __init__(self, session: Any, clipped: Callable[[], bool] = lambda: False) -> None:
        self.session = session
        self.clipped = clipped  # a clip_grad_norm_ seen since the last backward (`_order`'s finding)
        self.after: dict[int, list[tuple[weakref.ref[torch.Tensor], int, str]]] = {}  # id(opt) -> (grad, version, name)
        self.largest: dict[int, torch.Tensor] = {}  # id(opt) -> each followed gradient's largest |value| (device)
        self.frame: UserFrame | None = None  # the user's zero_grad() line at the first such step
        self.steps: list[int] = []  # steps whose written gradients a zero_grad discarded
        self.written = 0  # gradients written at the first such step
        self.tracked = 0
        self.names: list[str] = []
        self.reported = False

    def stepped(self, opt: torch.optim.Optimizer) -> None:
        """After `opt.step()`: the versions of the gradients it applied."""
        if self.reported:
            return
        kept: list[tuple[weakref.ref[torch.Tensor], int, str]] = []
        for g in opt.param_groups:
            for p in g["params"]:
                grad = p.grad
                if grad is not None and not grad.is_sparse:
                    kept.append((weakref.ref(grad), grad._version, self.session.param_index.name(p) or "?"))
                    if len(kept) >= MAX_TRACKED:
                        break
            if len(kept) >= MAX_TRACKED:
                break
        if kept:
            self.after[id(opt)] = kept
            with torch.no_grad():  # (no read: compared on the device at zero_grad, if a write happened)
                self.largest[id(opt)] = _stack([_largest(r()) for r, _, _ in kept])

    def zero_grad(self, opt: Any, caller: Any = None) -> Finding | None:
        """`opt.zero_grad()` (called from frame `caller`) is about to reset the gradients."""
        kept = self.after.pop(id(opt), None)
        before = self.largest.pop(id(opt), None)
        if not kept or before is None or self.reported:
            return None
        idx, grads = [], []
        for i, (ref, v, _) in enumerate(kept):
            if (g := ref()) is not None and g._version != v:
                idx.append(i)
                grads.append(g)
        if not idx or self.clipped():
            return None  # (a clip_grad_norm_ the order watch saw: its finding, with the clip's line)
        with torch.no_grad():
            now = _stack([_largest(g) for g in grads])
            was = before[idx] if before.device == now.device else before[idx].to(now.device)
            read = torch.stack([now.max(), (now != was).sum().float()]).cpu().tolist()  # (one read)
        largest, changed = read
        if largest == 0 or changed == 0:
            return None  # zeroed by hand (a reset), or a write that changed no value (a clip that did not act)
        if not self.steps:
            self.written, self.tracked, self.names = int(changed), len(kept), [kept[i][2] for i in idx][:4]
            start = find_frame(in_user_file, caller) if caller is not None else None
            self.frame = user_frame_of(start) if start is not None else None
        self.steps.append(self.session.step)
        if len(self.steps) < MIN_STEPS:
            return None
        self.reported = True
        self.after.clear()
        self.largest.clear()
        norm = self.session.health.last("grad_norm") if "grad_norm" in self.session.health.names() else None
        return finding("grad_write_discarded", category=Category.GRADIENT, stage=Stage.BACKWARD, step=self.steps[0],
                       op="zero_grad", frame=self.frame, written=self.written, tracked=self.tracked,
                       first=self.steps[0], steps=len(self.steps), examples=", ".join(self.names[:2]),
                       evidence={"gradients_written_after_step": self.written, "gradients_followed": self.tracked,
                                 "written_examples": self.names[:4], "steps_seen_like_this": self.steps[:8],
                                 "grad_norm_last_step": num(norm) if norm is not None else None})


def _stack(values: list[torch.Tensor]) -> torch.Tensor:
    """Scalars from several devices (a model split across devices) in one tensor, on the first's."""
    device = values[0].device
    return torch.stack([v if v.device == device else v.to(device) for v in values])


def _largest(g: torch.Tensor | None) -> torch.Tensor:
    """The largest |value| of a gradient, as a float32 scalar on its device (no read)."""
    if g is None:
        return torch.tensor(float("nan"))
    (local,) = local_shards([g.detach()])  # (a `fully_shard` DTensor: its rank's shard, maybe empty)
    if local.numel() == 0:
        return torch.zeros((), device=local.device)
    return local.abs().amax().float()


def patch_zero_grad(session: Any, writes: GradWrites, add: Any) -> None:
    """`Optimizer.zero_grad` tells `writes` first (`_zerograd`)."""

    def heard(obj: Any, kind: str, caller: Any) -> None:
        if kind != "optimizer" or not writes.after or writes.reported:
            return
        try:
            add(writes.zero_grad(obj, caller))
        except Exception:
            writes.reported = True  # (asks nothing more of this run)
            raise

    on_zero_grad(session, "dynamics.grad_writes", heard)
