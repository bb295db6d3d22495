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
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from .._findings import Category, Finding, Stage
from .._zerograd import on_zero_grad
from ._common import finding, num

MAX_TRACKED = 16  # gradients followed per optimizer
MIN_STEPS = 2  # steps whose writes were discarded before the finding


class GradWrites:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.after: dict[int, list[tuple[weakref.ref[torch.Tensor], int, str]]] = {}  # id(opt) -> (grad, version, name)
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

    def zero_grad(self, opt: Any) -> Finding | None:
        """`opt.zero_grad()` is about to reset the gradients."""
        kept = self.after.pop(id(opt), None)
        if not kept or self.reported:
            return None
        written = [(g, n) for ref, v, n in kept if (g := ref()) is not None and g._version != v]
        if not written:
            return None
        with torch.no_grad():
            largest = float(torch.stack([g.detach().abs().amax().float().cpu() for g, _ in written]).max())
        if largest == 0:
            return None  # zeroed by hand: a reset, not a change
        if not self.steps:
            self.written, self.tracked, self.names = len(written), len(kept), [n for _, n in written]
        self.steps.append(self.session.step)
        if len(self.steps) < MIN_STEPS:
            return None
        self.reported = True
        self.after.clear()
        norm = self.session.health.last("grad_norm") if "grad_norm" in self.session.health.names() else None
        return finding("grad_write_discarded", category=Category.GRADIENT, stage=Stage.BACKWARD, step=self.steps[0],
                       op="zero_grad", written=self.written, tracked=self.tracked, first=self.steps[0],
                       steps=len(self.steps), examples=", ".join(self.names[:2]),
                       evidence={"gradients_written_after_step": self.written, "gradients_followed": self.tracked,
                                 "written_examples": self.names[:4], "steps_seen_like_this": self.steps[:8],
                                 "grad_norm_last_step": num(norm) if norm is not None else None,
                                 "harm": "the writes changed gradients that optimizer.step() had already applied; "
                                         "zero_grad() then discarded them, so the gradients the optimizer used were "
                                         "never changed by them"})


def patch_zero_grad(session: Any, writes: GradWrites, add: Any) -> None:
    """`Optimizer.zero_grad` tells `writes` first (`_zerograd`)."""

    def heard(obj: Any, kind: str, caller: Any) -> None:
        if kind != "optimizer" or not writes.after or writes.reported:
            return
        try:
            add(writes.zero_grad(obj))
        except Exception:
            writes.reported = True  # (asks nothing more of this run)
            raise

    on_zero_grad(session, "dynamics.grad_writes", heard)
