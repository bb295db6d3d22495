"""Coverage without a DataLoader: training forwards whose graph never reaches a backward (session 9).

The ledger's coverage invariant (`data.coverage_lost`, `_verdicts.py`) is kept per DataLoader
epoch: a batch the loop fetched and never backpropagated. Batches that come from a list or a
generator have no epoch, so that check cannot see them. Their invariant is the same, per forward:
a training forward (gradients on, the model in `train()`) whose output's graph reaches a backward
trained on its rows; one whose graph never does lost them (a loop that computes the loss of a
small batch, keeps it "for accumulation", and starts the next step with `zero_grad()` and a new
forward).

Measured with one hook per training forward on its output's autograd node (`_reach.when_reached`:
it runs when a backward's gradient arrives there; it lives with the graph, and does nothing once
the session ended), so summed losses over several forwards (accumulation by summing) reach it too.
Only a forward whose output a library loss was computed from (`on_loss`: an `F.*` loss or an
`nn` loss module whose graph, walked back to the nearest tagged nodes, 64 at most, holds the
forward's output node, tagged in its `metadata`) can lose its rows: an agent's acting forward,
a prediction turned into numbers, a layer-local score feed none.
A module with no trainable parameter (a loss module) gives no model rows. Per forward line: the
forwards, those reached, and the rows of the others (the input's first dimension). Forwards after
the line's last reached one are undecided (the run stopped). A line
never reached is a measurement (train accuracy without `no_grad`, a frozen teacher) and stays
quiet. Severity as coverage: a warning when the lost rows are at least `LOST_SHARE` of the line's
rows and more than one forward; `info` below.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING, Any

import torch

from .._frames import UserFrame, user_frame_from_stack
from .._loaderstream import tensors as batch_tensors
from .._reach import upstream_tags, when_reached
from ._make import finding

if TYPE_CHECKING:
    from ._checker import DataLedger

LOST_SHARE = 0.05
MAX_FORWARDS = 1 << 20  # forwards followed per line
TAG = "torchtriage.forward"  # the (line, forward) a training forward's output node carries


@dataclasses.dataclass(eq=False)
class _Line:
    frame: UserFrame
    reached: bytearray = dataclasses.field(default_factory=bytearray)  # per forward: 1 once a backward reached it
    rows: list[int] = dataclasses.field(default_factory=list)  # per forward: its input's rows
    fed: bytearray = dataclasses.field(default_factory=bytearray)  # per forward: 1 once a library loss used it


class Unbackwarded:
    def __init__(self, ledger: DataLedger) -> None:
        self.ledger = ledger
        self.lines: dict[tuple[str, int], _Line] = {}
        self.active = True
        # per model: whether it has a trainable parameter (a loss module has none: its forward
        # gives no model any rows; it runs in train() mode during an evaluation with gradients on)
        self.learns: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()

    def on_forward(self, model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if not (model.training and torch.is_grad_enabled() and not torch.is_inference_mode_enabled()):
            return
        learns = self.learns.get(model)
        if learns is None:
            learns = self.learns[model] = any(p.requires_grad for p in model.parameters())
        if not learns:
            return
        if not any(t.grad_fn is not None for t in batch_tensors(output)):
            return
        frame = user_frame_from_stack(1)
        if frame is None:
            return
        key = (frame.file, frame.line)
        line = self.lines.get(key)
        if line is None:
            line = self.lines[key] = _Line(frame)
        if len(line.rows) >= MAX_FORWARDS:
            return
        x = next((t for t in batch_tensors((args, kwargs)) if t.dim() >= 1), None)
        i = len(line.rows)
        line.rows.append(int(x.shape[0]) if x is not None else 1)
        line.reached.append(0)
        line.fed.append(0)
        reached = line.reached

        def arrived() -> None:
            if self.active:
                reached[i] = 1

        for node in when_reached(output, arrived):
            node.metadata[TAG] = (line, i)

    def on_loss(self, call: Any) -> None:
        """A library loss (`F.*`, an `nn` loss module) computed from a recent training forward's
        output: that forward is a training batch whose rows should reach a backward (an agent's
        acting forward, a prediction turned into numbers, feeds none)."""
        if not self.lines:
            return
        for line, i in upstream_tags(call.output, TAG):
            line.fed[i] = 1

    def end(self) -> list[Any]:
        self.active = False
        out = []
        for line in self.lines.values():
            last = line.reached.rfind(1)
            if last < 0:
                continue  # never reached: a measurement, not a training forward
            decided = range(last + 1)
            lost = [i for i in decided if not line.reached[i] and line.fed[i]]
            if not lost:
                continue
            rows = sum(line.rows[i] for i in decided)
            lost_rows = sum(line.rows[i] for i in lost)
            share = lost_rows / max(rows, 1)
            harmful = share >= LOST_SHARE and len(lost) > 1
            frame = line.frame
            evidence = {"forwards": len(decided), "never_backpropagated": len(lost), "rows": rows,
                        "lost_rows": lost_rows, "share": round(share, 4), "first_lost_forwards": lost[:10],
                        "undecided_after_last_backward": len(line.rows) - len(decided)}
            fields = {"lost": lost_rows, "rows": rows, "share": f"{100 * share:.1f}%", "forwards": len(lost),
                      "total": len(decided), "where": f"{frame.file}:{frame.line}"}
            out.append(finding("coverage_lost", "coverage_forwards", "warning" if harmful else "info", frame, fields,
                               evidence))
        return out
