"""Samples of a batch that mix in the forward pass (`silent.samples_mixed`).

The invariant: a supervised model's output for sample i depends on sample i only (in eval mode:
BatchNorm's batch statistics aside). A layout bug that raises nothing breaks it: an RNN / LSTM /
GRU or attention built with `batch_first` not matching the tensor it gets (it recurs or attends
over the samples of the batch), a `view` / `reshape` where a `permute` was meant, a softmax or a
normalisation over the batch axis.

The probe calls the model twice on the step's batch, in eval mode under no_grad, with the same
RNG state before each call: as it was, then with sample 0 replaced by a copy of sample 1 in
every per-sample argument (a valid input whatever the data: images, token ids, masks, lengths).
The outputs of samples 1.. must not change (rounding aside). The batch size is known, not
guessed: the DataLoader's count of sampler indices for the batch, else the sample axis of the
loss call (`cross_entropy`'s N, CTC's N). The batch axis of an argument or output is its one
axis of that size; the probe does nothing when an argument has two (a pair matrix, an adjacency)
or an integer argument has none (`edge_index`: the samples are linked by the data), or the
model holds a tensor with two (an adjacency kept as a buffer or attribute), or when no
output has one (a CLIP similarity matrix B x B is left out). When the batch size came from the
loss and another axis of the input keeps its slices independent (a time-major (T, B, F) model
whose loss reads (T, ...) first), the model is not judged.

The model, its buffers and module attributes, its train/eval modes and the RNG streams are left
as they were: the run's numbers do not change.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn as nn
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten

from .._findings import Finding, Severity, Stage
from .._frames import UserFrame
from ._common import finding
from ._mixsite import MixSite, batch_axis, locate_mix
from ._still import held_still

MIN_BATCH = 3  # sample 0 replaced by sample 1: at least one untouched sample besides the source


POINTWISE_LOSSES = frozenset({"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
                              "binary_cross_entropy_with_logits", "soft_margin_loss", "poisson_nll_loss",
                              "gaussian_nll_loss"})


def loss_batch(name: str, inp: Any, args: tuple[Any, ...], target: Any = None) -> int | None:
    """The number of samples of a loss call whose API names its sample axis: `cross_entropy`,
    `nll_loss`, the margin losses (input (N, C, ...): N), `ctc_loss` (log_probs (T, N, C): N);
    a pointwise loss (`mse_loss`, `binary_cross_entropy_with_logits`, ...) whose input and
    target share their leading axis: that axis, by convention (a time-major loss is told apart
    by the probe: `_independent_along`)."""
    if not isinstance(inp, torch.Tensor):
        return None
    if name in ("cross_entropy", "nll_loss", "multi_margin_loss", "multilabel_margin_loss",
                "multilabel_soft_margin_loss") and inp.dim() >= 2:
        return int(inp.shape[0])
    if name == "ctc_loss" and inp.dim() == 3:
        return int(inp.shape[1])
    if name in POINTWISE_LOSSES and inp.dim() >= 1 and isinstance(target, torch.Tensor) and target.dim() >= 1 \
            and target.shape[0] == inp.shape[0]:
        return int(inp.shape[0])
    return None


def _layout(args: tuple[Any, ...], kwargs: dict[str, Any], n: int) -> tuple[list[Any], Any, dict[int, int]] | None:
    """The call's leaves, their tree, and the batch axis of each per-sample tensor leaf; None
    when the call's data links its samples (a tensor with two axes of size n, an integer tensor
    with none) or holds no per-sample tensor."""
    leaves, spec = tree_flatten((args, kwargs))
    axes: dict[int, int] = {}
    for i, t in enumerate(leaves):
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            continue
        count = sum(1 for s in t.shape if s == n)
        if count > 1:
            return None
        if count == 1:
            axes[i] = list(t.shape).index(n)
        elif not (t.is_floating_point() or t.is_complex()) and t.numel() > 1:
            return None
    if not any(leaves[i].dim() >= 2 for i in axes):
        return None
    return leaves, spec, axes


def _replaced(leaves: list[Any], axes: dict[int, int]) -> list[Any]:
    """Sample 0 of every per-sample tensor replaced by sample 1 (a valid input whatever the data;
    when samples 0 and 1 are equal nothing changes, and nothing is found)."""
    out = list(leaves)
    for i, axis in axes.items():
        t = leaves[i].clone()
        t.select(axis, 0).copy_(leaves[i].select(axis, 1))
        out[i] = t
    return out


def _outputs(out: Any, n: int) -> list[tuple[torch.Tensor, int]]:
    found = []
    for t in tree_leaves(out):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 1:
            axis = batch_axis(t, n)
            if axis is not None:
                found.append((t, axis))
    return found


def _numbers(a: list[tuple[torch.Tensor, int]], b: Any, n: int) -> list[torch.Tensor] | None:
    """Device numbers [other samples changed, largest change there, change of sample 0, output
    scale] (no read); None when the two calls' outputs do not line up."""
    bs = _outputs(b, n)
    if len(bs) != len(a) or any(ta.shape != tb.shape or x != y for (ta, x), (tb, y) in zip(a, bs)):
        return None
    moved = worst = own = scale = None
    for (ta, axis), (tb, _) in zip(a, bs):
        if not ta.numel():
            continue
        per = (ta.float() - tb.float()).abs().movedim(axis, 0).reshape(n, -1).amax(dim=1)
        top = ta.detach().abs().max().float()
        m = per[1:] > 32.0 * torch.finfo(ta.dtype).eps * top.clamp_min(1e-3)  # rounding at the output's scale
        moved = m if moved is None else moved | m
        worst = per[1:].max() if worst is None else torch.maximum(worst, per[1:].max())
        own = per[0] if own is None else torch.maximum(own, per[0])
        scale = top if scale is None else torch.maximum(scale, top)
    if moved is None or worst is None or own is None or scale is None:
        return None
    return [moved.sum().float(), worst, own, scale]


def _changed(a: list[tuple[torch.Tensor, int]], b: Any, n: int) -> int:
    nums = _numbers(a, b, n)
    return int(nums[0]) if nums is not None else 0


def _independent_along(call: Any, leaves: list[Any], spec: Any, axes: dict[int, int], n: int) -> bool:
    """Another axis of the main per-sample input keeps its slices independent (the model's own
    batch axis, when the loss's N was another axis: a time-major model)."""
    main = next((i for i in axes if leaves[i].is_floating_point() and leaves[i].dim() >= 2),
                next(i for i in axes if leaves[i].dim() >= 2))
    t = leaves[main]
    for axis, m in enumerate(t.shape):
        if m == n or m < MIN_BATCH or list(t.shape).count(m) != 1:
            continue
        a = _outputs(call(leaves, spec), m)
        if not a:
            continue
        swapped = list(leaves)
        p = t.clone()
        p.select(axis, 0).copy_(t.select(axis, 1))
        swapped[main] = p
        try:
            if _changed(a, call(swapped, spec), m) == 0:
                return True
        except Exception:  # another layout the model refuses: not its batch axis
            continue
    return False


@dataclasses.dataclass
class Probe:
    """A probe's first half: the two calls made, the numbers on the device, waiting for a read."""

    model: weakref.ref[nn.Module]
    leaves: list[Any]
    spec: Any
    axes: dict[int, int]
    n: int
    source: str  # "loader" or "loss": where the batch size came from
    frame: UserFrame | None  # the user's call of the model
    numbers: list[torch.Tensor]
    step: int = 0  # the step whose batch was probed


def _calls(model: nn.Module, device: torch.device) -> Any:
    @contextlib.contextmanager
    def held() -> Iterator[Any]:
        with held_still(model, device) as rewind:
            def call(values: list[Any], tree: Any) -> Any:
                rewind()
                a, kw = tree_unflatten(values, tree)
                return model(*a, **kw)
            yield call
    return held()


def _context_input(call: Any, leaves: list[Any], spec: Any, axes: dict[int, int], n: int) -> int | None:
    """With two or more per-sample float inputs (image and question; support and query sets of
    a few-shot episode), each replaced alone: the position of the first that mixes nothing when
    replaced alone (the other's samples, a support set, are then its context by design), else
    None (each mixes: the model mixes)."""
    floats = [i for i in axes if leaves[i].is_floating_point() and leaves[i].dim() >= 2]
    if len(floats) < 2:
        return None
    a = _outputs(call(leaves, spec), n)
    for i in floats:
        if _changed(a, call(_replaced(leaves, {i: axes[i]}), spec), n) == 0:
            return floats.index(i)
    return None


def start_probe(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], n: int, source: str,
                frame: UserFrame | None) -> Probe | None:
    """Call the model on the batch, then with sample 0 replaced by sample 1 (no read: the numbers
    stay on the device, to ride the step's read); None when the call cannot be judged."""
    local = _local_module(model)
    if local is None or n < MIN_BATCH or _uses_batch_statistics(local):
        return None
    model = local
    if _links_samples(model, n):
        return None
    lay = _layout(args, kwargs, n)
    if lay is None:
        return None
    leaves, spec, axes = lay
    with _calls(model, next(leaves[i].device for i in axes)) as call:
        try:
            first = _outputs(call(leaves, spec), n)
            numbers = _numbers(first, call(_replaced(leaves, axes), spec), n) if first else None
        except Exception:  # a model that cannot be called this way: not judged
            return None
    if numbers is None:
        return None
    return Probe(weakref.ref(model), leaves, spec, axes, n, source, frame, numbers)


def finish_probe(probe: Probe, values: list[float]) -> Finding | None:
    """The numbers read: None when the other samples' outputs stayed the same, else (after a
    check that no other axis is the model's batch axis, and a run that locates where the
    samples mix: reads of its own, on this path only) a `silent.samples_mixed` finding."""
    changed, worst, own, scale = int(values[0]), *values[1:]
    model = probe.model()
    if changed == 0 or model is None:
        return None
    leaves, spec, axes, n = probe.leaves, probe.spec, probe.axes, probe.n
    with _calls(model, next(leaves[i].device for i in axes)) as call:
        try:
            if probe.source == "loss" and _independent_along(call, leaves, spec, axes, n):
                return None
            context = _context_input(call, leaves, spec, axes, n)
            swapped = _replaced(leaves, axes)
            site = locate_mix(lambda k: call(swapped if k else leaves, spec), model, n, [swapped[i] for i in axes])
        except Exception:  # the model changed since (or our bug): not judged
            return None
    if site is not None and _batch_statistics(site):
        return None  # a norm layer that uses the batch's statistics in eval mode, by its design
    f = _finding(site, probe.frame, changed, n, worst, own, scale, probe.source, type(model).__name__)
    if context is not None:  # the samples of one input are another's context (a support set): an info
        f = f.replace(severity=Severity.INFO, evidence={**f.evidence, "only_through_input": context})
    return f


def probe_mixing(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], n: int, source: str,
                 frame: UserFrame | None) -> Finding | None:
    """Both halves at once (tests, a session's end)."""
    probe = start_probe(model, args, kwargs, n, source, frame)
    return finish_probe(probe, torch.stack(probe.numbers).tolist()) if probe is not None else None


def _local_module(model: nn.Module) -> nn.Module | None:
    """The module to call on this process alone, eagerly: a DataParallel / DistributedDataParallel wrapper's
    own module (its forward would scatter or broadcast); None for a sharded model (FSDP, DTensor
    parameters: its forward gathers across ranks)."""
    orig = getattr(model, "_orig_mod", None)  # a torch.compile'd module: its eager self (no recompile)
    if isinstance(orig, nn.Module):
        model = orig
    if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        model = model.module
    for m in model.modules():
        if any(c.__name__ in ("FullyShardedDataParallel", "FSDPModule") for c in type(m).__mro__):
            return None
    if any(type(p).__name__ == "DTensor" or type(p.data).__name__ == "DTensor" for p in model.parameters()):
        return None
    return model


def _links_samples(model: nn.Module, n: int) -> bool:
    """The model holds a tensor with two axes of the batch size (a graph's adjacency kept as a
    buffer or attribute, dense or sparse): its "samples" are the nodes of one graph, linked by
    design."""
    for m in model.modules():
        for t in (*m.buffers(recurse=False), *m.parameters(recurse=False), *m.__dict__.values()):
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and sum(1 for s in t.shape if s == n) >= 2:
                return True
    return False


def _uses_batch_statistics(model: nn.Module) -> bool:
    """A batch norm without running statistics normalises with the batch's in eval mode too:
    its samples mix by the model's design."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) and (not m.track_running_stats or m.running_mean is None)
               for m in model.modules())


def _batch_statistics(site: MixSite) -> bool:
    layer = site.layer
    if isinstance(layer, nn.modules.batchnorm._BatchNorm):
        return True
    return site.op in ("batch_norm", "native_batch_norm")


def _finding(site: MixSite | None, frame: UserFrame | None, changed: int, n: int, worst: float, own: float,
             scale: float, source: str, model: str) -> Finding:
    ev: dict[str, Any] = {
        "batch_size": n,
        "batch_size_from": "DataLoader sampler indices" if source == "loader" else "the loss's sample axis",
        "perturbed": "sample 0 replaced by another sample of the batch",
        "other_samples_changed": f"{changed}/{n - 1}", "max_change_other_samples": float(f"{worst:.4g}"),
        "change_of_sample_0": float(f"{own:.4g}"), "output_scale": float(f"{scale:.4g}")}
    module, op, where = "", model, frame
    if site is not None:
        module = site.module or ""
        op = site.op
        ev["mixes_at"] = f"{site.op} ({module or '<root>'})"
        if site.shape:
            ev["input_there"] = list(site.shape)
            ev["batch_axis_there"] = site.axis
        if site.layer is not None and hasattr(site.layer, "batch_first"):
            ev["batch_first"] = bool(site.layer.batch_first)
        if site.frame is not None:
            where = site.frame
    # A warning when most of the other samples' outputs depend on sample 0 (what the loss of the
    # step reads of them); a few (a routing or capacity effect) are an info.
    severity = Severity.WARNING if 2 * changed >= n - 1 else Severity.INFO
    variant = None if site is None else "site" if site.shape else "at"
    layout = f"{list(site.shape)}, batch axis {site.axis}" if site is not None and site.shape else ""
    return finding("samples_mixed", severity=severity, stage=Stage.FORWARD, frame=where, module=module, op=op,
                   variant=variant, changed=changed, others=n - 1,
                   at=ev.get("mixes_at", model), layout=layout, evidence=ev)
