"""Channels-last data given to a convolution through reshape / view instead of permute (session 13).

A convolution reads its input as (batch, channels, *spatial). Images (and multichannel series)
often arrive channels-last: (batch, H, W, C). `x.permute(0, 3, 1, 2)` moves the channel axis;
`x.reshape(n, C, H, W)` / `x.view(...)` keeps the element order and re-reads it: each
"channel" plane is then a strip of the image with R, G, B interleaved along its rows. Nothing
raises (the element count matches), and the model trains on scrambled pictures.

The invariant every correct program keeps: a tensor whose element order comes from the data
(not from a learned layer) reaches a convolution spatially coherent in its own layout, and no
more coherent when read back as channels-last. Two things decide whether it applies:

- provenance (session 15). Only a tensor laid out by the data can be channels-last data: one
  made by a learned linear map (a convolution, a transposed convolution, a linear layer, a
  matmul, an embedding) has the layout the network gives it, whatever it looks like (the
  period-k artefacts of a stride-k upsampling read back with C = k look smooth; HiFi-GAN's
  hidden maps did). So an input whose autograd graph holds such an op is not judged; a call
  under no_grad to a trainable convolution (an evaluation, provenance unknown) is not judged
  nor counted (a training call follows). A detached generator output has no graph: the
  statistic below must hold on it by itself.
- the statistic. Each (sample, channel) plane is standardised first (mean 0, variance 1), then
  the roughness of the input (the mean squared difference of spatial neighbours over twice the
  variance: 0 for a smooth picture, 1 for noise) and of the same elements read as channels-last
  (`z.reshape(n, *spatial, C).movedim(-1, 1)`: the exact inverse of the mistake) are compared.
  Standardising first matters: read back, each plane is a concatenation of pieces of all the
  given channels, and channels with different offsets or scales (a generator's output at
  initialisation, a discriminator's hidden maps) would make that plane's variance large and its
  neighbour differences small, a smoothness that is only the offsets (session 15's false alarms
  on GAN discriminators). For the real mistake the given "channels" are bands of one picture:
  standardising each band leaves the picture smooth read back.
When the second roughness is a small fraction of the first, the data was channels-last and the
reshape scrambled it. A correct input read that way is scrambled, so it only gets rougher;
noise is as rough either way. A resize between the reshape and the convolution blurs the
interleaving, and then nothing is said.

Cost: a forward pre-hook on those convolutions until each has been judged on `CALLS` calls
(then removed, or after `MAX_SKIPPED` calls it did not judge); a walk of at most `GRAPH_NODES`
autograd nodes and a few reductions over at most `SAMPLES` samples per call judged, read along
with the step's one read (the report comes at the next optimizer step).
"""

from __future__ import annotations

import ast
import re
import sys
import weakref
from typing import Any

import torch
import torch.nn as nn

from .._findings import Severity, Stage
from .._frames import UserFrame, find_frame, in_user_file, user_frame_from_stack, user_frame_of
from .._source import parsed
from .._transparent import our_hook, standing_aside
from ._common import finding
from ._flags import DeferredFlags

CALLS = 2  # calls judged per convolution
SAMPLES = 8  # samples of a batch measured
MIN_ROUGH = 0.15  # the input as given must be at least this rough
RATIO = 0.4  # read as channels-last, at most this fraction of that roughness
MAX_MODULES = 64
MAX_SKIPPED = 16  # calls not judged (no_grad evaluations, learned inputs) before the hook goes
GRAPH_NODES = 256  # autograd nodes walked for an input's provenance
# autograd nodes of the learned linear maps that give a tensor its layout
_LEARNED = re.compile(r"^(?:\w*Conv\w*|Addmm|Mm|Bmm|Baddbmm|Addbmm|Addmv|Mv|Linear|Embedding\w*|Matmul|Einsum)Backward")


def roughness(z: torch.Tensor) -> torch.Tensor:
    """Mean squared difference of spatial neighbours over twice the variance (per sample and
    channel, centred): ~0 for smooth data, ~1 for noise. A 0-d tensor (no read)."""
    spatial = tuple(range(2, z.dim()))
    z = z - z.mean(dim=spatial, keepdim=True)
    var = z.pow(2).mean()
    diffs = [z.diff(dim=a).pow(2).mean() for a in spatial if z.shape[a] > 1]
    return torch.stack(diffs).mean() / (2 * var).clamp_min(1e-30)


def channels_last_reading(x: torch.Tensor) -> torch.Tensor | None:
    """[roughness as given, roughness read as channels-last] of a conv input (a 1-d tensor on
    the input's device, not read here), or None."""
    if x.dim() < 3 or not x.is_floating_point() or x.shape[0] == 0:
        return None
    x = x[:SAMPLES].detach().float()
    n, c, spatial = x.shape[0], x.shape[1], tuple(x.shape[2:])
    if any(s < 4 for s in spatial):
        return None
    dims = tuple(range(2, x.dim()))
    z = x - x.mean(dim=dims, keepdim=True)
    z = z / z.pow(2).mean(dim=dims, keepdim=True).sqrt().clamp_min(1e-30)  # each plane standardised
    back = z.reshape(n, *spatial, c).movedim(-1, 1)
    return torch.stack([roughness(z), roughness(back)])


def learned_layout(x: torch.Tensor) -> str | None:
    """The autograd node of a learned linear map (convolution, linear, matmul, embedding) that
    `x` was computed through, else None: such a tensor's layout is the network's own. A graph
    larger than `GRAPH_NODES` counts as learned (a data pipeline's graph is a few ops)."""
    root = x.grad_fn
    if root is None:
        return None
    seen, todo = {root}, [root]
    while todo:
        node = todo.pop()
        name = type(node).__name__
        if _LEARNED.match(name):
            return name
        for nxt, _ in getattr(node, "next_functions", ()):
            if nxt is not None and nxt not in seen:
                if len(seen) >= GRAPH_NODES:
                    return "graph"
                seen.add(nxt)
                todo.append(nxt)
    return None


class ChannelLayoutWatch:
    """Pre-hooks on the few-channel convolutions of the watched models, for their first calls."""

    def __init__(self, session: Any, flags: DeferredFlags) -> None:
        self.session = session
        self.flags = flags  # the numbers ride the step's one read
        self._handles: dict[int, Any] = {}
        self._calls: dict[int, int] = {}
        self._skipped: dict[int, int] = {}
        self._reported: set[int] = set()

    def watch(self, model: nn.Module) -> None:
        n = 0
        for path, m in model.named_modules():
            if n >= MAX_MODULES:
                break
            if not isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d)) or not 2 <= m.in_channels <= 4:
                continue
            if id(m) in self._handles or id(m) in self._calls:
                continue
            n += 1
            self._handles[id(m)] = m.register_forward_pre_hook(our_hook(self._hook(weakref.ref(model), path)))

    def _hook(self, ref: weakref.ref[nn.Module], path: str) -> Any:
        def pre(module: nn.Module, args: tuple[Any, ...]) -> None:
            __tracebackhide__ = True
            if self.session.busy or standing_aside():
                return
            try:
                self._judge(module, ref(), path, args)
            except Exception as e:  # our bug: report it, the user's forward goes on
                self.close()
                self.session.internal_error("silent.channels_last_reshaped", e)
        return pre

    def _judge(self, module: Any, model: nn.Module | None, path: str, args: tuple[Any, ...]) -> None:
        key = id(module)
        x = args[0] if args else None
        if isinstance(x, torch.Tensor) and not self._known_layout(module, x):
            skipped = self._skipped.get(key, 0) + 1
            self._skipped[key] = skipped
            if skipped >= MAX_SKIPPED:
                self._unhook(key)
            return
        calls = self._calls.get(key, 0) + 1
        self._calls[key] = calls
        if calls >= CALLS:
            self._unhook(key)
        if not isinstance(x, torch.Tensor) or key in self._reported:
            return
        if x.dim() != len(module.weight.shape) or x.shape[1] != module.in_channels:
            return  # unbatched or refused: the conv's own error explains it
        with torch.no_grad():
            read = channels_last_reading(x)
        if read is None:
            return
        shape, frame, step = list(x.shape), self._frame(model, x), self.session.step
        name = self.session.module_name(module) or path or type(module).__name__
        self.flags.add([read], lambda vals: self._report(key, name, shape, frame, step, vals[0], vals[1]))

    def _unhook(self, key: int) -> None:
        h = self._handles.pop(key, None)
        if h is not None:
            h.remove()

    @staticmethod
    def _known_layout(module: Any, x: torch.Tensor) -> bool:
        """Whether the element order of `x` can be the data's: not computed through a learned
        linear map, and not an evaluation call of a trainable convolution (under no_grad the
        graph that would tell is missing; a training call follows)."""
        if x.grad_fn is not None:
            return learned_layout(x) is None
        weight = getattr(module, "weight", None)
        return torch.is_grad_enabled() or not (isinstance(weight, torch.Tensor) and weight.requires_grad)

    def _report(self, key: int, name: str, shape: list[int], frame: UserFrame | None, step: int,
                given: float, last: float) -> None:
        if key in self._reported or not (given == given and last == last):
            return
        if given < MIN_ROUGH or last > RATIO * given:
            return
        self._reported.add(key)
        n, c, spatial = shape[0], shape[1], shape[2:]
        evidence = {"module": name, "input_shape": shape, "channels": c,
                    "roughness_as_given": round(given, 4), "roughness_read_channels_last": round(last, 4),
                    "ratio": round(last / given, 4), "samples_measured": min(n, SAMPLES)}
        self.session.add(finding(
            "channels_last_reshaped", severity=Severity.WARNING, stage=Stage.FORWARD,
            frame=frame, module=name, op="reshape", step=step, evidence=evidence,
            conv=name, shape=shape, c=c, last_shape=[n, *spatial, c],
            given=f"{given:.3f}", last=f"{last:.3f}", perm=_perm(len(shape))))

    @staticmethod
    def _frame(model: nn.Module | None, x: torch.Tensor) -> UserFrame | None:
        """The line of the root model's forward that made the tensor the convolution got (the
        last assignment of the local holding it), else the line running there, else the
        innermost user line."""
        if model is not None:
            f = find_frame(lambda f: in_user_file(f) and f.f_locals.get("self") is model, sys._getframe(2), depth=64)
            if f is not None:
                name = next((k for k, v in f.f_locals.items() if v is x), None)
                made = _assigned(f.f_code.co_filename, f.f_code.co_firstlineno, f.f_lineno, name) if name else None
                return user_frame_of(f, made)
        return user_frame_from_stack(3)

    def close(self) -> None:
        for h in self._handles.values():
            h.remove()
        self._handles.clear()


def _assigned(path: str, first: int, now: int, name: str) -> int | None:
    """The last line before `now`, in the function starting at `first`, that assigns `name`."""
    tree = parsed(path)
    if tree is None:
        return None
    fn = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.lineno <= first <= (n.body[0].lineno if n.body else n.lineno)
               and n.lineno <= now <= (n.end_lineno or n.lineno)), None)
    if fn is None:
        return None
    lines = [n.lineno for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
             and n.lineno < now and any(isinstance(t, ast.Name) and t.id == name
                                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))]
    return max(lines, default=None)


def _perm(dim: int) -> str:
    """The permute that moves a channels-last axis first, for an input of `dim` dimensions."""
    return "permute(" + ", ".join(["0", str(dim - 1), *(str(i) for i in range(1, dim - 1))]) + ")"
