"""A dense target must line up with its input: a geometric augmentation applied to one of them only.

A segmentation mask, a depth map, a clean image to denoise: a target with the input's spatial
dims says something about every pixel of the input, and its regions explain the input's pixels
(the pixels of one class, or of one depth band, look alike). A flip, rotation or shift applied
to the image and not to its mask (or the reverse) breaks that pairing: the mask of the scene
before the flip is trained against the flipped pixels.

Measured on the warm-up loss calls whose target is dense: the target is cut into regions (its
classes; a float target into 8 per-sample quantile bands), and the share of the input's variance
those regions explain (R², within-region variance against the total) is compared with the same
regions moved by a set of flips, rotations and shifts. With the given target in place, moving it
can only explain the input worse; a sample for which a moved target explains the input clearly
better (R² gap ≥ 0.1, the moved R² ≥ 0.25) was trained on a target that does not line up with it,
when the moved targets of those samples explain their inputs well on average (R² ≥ 0.5: a
measurement that mixes shifted copies of the scene, a lensless camera's, is explained a little
better by one transform or another, never well).
Each comparison restricts the given target to the pixels the moved one covers. All on the data's
device, no sync but the label count (warm-up only); the numbers ride the step's one read.

A random crop or shift drawn separately for the input and its target (one draw per key) moves
each sample's target by its own offset: no transform of the list is shared by the samples. Every
integer shift is therefore also tried, per sample, on a grid of at most `_SCAN_SIDE` a side (the
R² of the target at every shift at once, from cross-correlations by FFT). A sample whose target
one shift restores shows one sharp peak: shifts away from it (more than `_PEAK` pixels) gain at
most half as much. A measurement that mixes shifted copies of the scene (a lensless camera's) is
explained by several shifts nearly equally (the second peak near 0.9 of the first), and so is no
one displaced copy. A finding when most samples (`_MOST`) have such a single-peaked shift that
gains `_GAP` and fits `_FIT`, their second peaks at most `_SECOND` of the first on average.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from .._findings import Severity, Stage
from ._common import is_index_tensor, same_storage, shape
from ._plans import Plan, Verdict

_SIDE = 64  # inputs larger than this are subsampled (every s-th pixel) to at most this side
_SAMPLES = 32  # the batch's first samples measured
_MAX_CLASSES = 32
_BANDS = 8  # a float target's quantile bands per sample
_MAX_CHANNELS = 8
_GAP = 0.1  # a moved target explains this much more of the input's variance
_FIT = 0.25  # ... and at least this much of it
_SHARE = 0.25  # samples of the batch so misaligned: a warning
_MIN_SAMPLES = 3
_COVER = 0.5  # a moved target must still cover this share of the pixels
# The flagged samples' moved targets must explain their inputs this well on average: a target the
# input was moved away from explains it as well as an aligned one once moved back (0.7-0.9). An
# input that is no moved copy of its target (a lensless or blurred measurement, a mix of shifted
# copies) is explained a little better by some transform or other, never well (about 0.4).
_RESTORED = 0.5
# ... and one transform must account for the misalignment: either samples the augmentation left
# alone line up as given (at least `_MIN_ALIGNED` explained this well: the pairing holds where no
# transform was applied), or the flagged samples agree on the orientation (flip) of their best
# transform (`_AGREE` of them: one flip, or rotations / shifts of one orientation). A mixture of
# shifted copies is best explained by a different orientation for each sample.
_ALIGNED = 0.6
_MIN_ALIGNED = 2
_AGREE = 0.75

_SCAN_SIDE = 32  # the per-sample shift scan's grid side (inputs subsampled to it)
_SCAN_SAMPLES = 16
_PEAK = 3  # pixels (of the scan grid) around the best shift that belong to its peak
_SECOND = 0.5  # the best gain elsewhere, as a share of the peak's: one displaced copy, not a mixture
_MOST = 0.5  # share of the samples so displaced (independent draws rarely agree on the offset)

# the transforms tried: (name, horizontal flip, vertical flip, degrees, shift x, shift y) (shifts
# in normalized coordinates, 0.25 = an eighth of the side)
_TRANSFORMS: list[tuple[str, bool, bool, float, float, float]] = []
for _fname, _fh, _fv in (("", False, False), ("horizontal flip", True, False), ("vertical flip", False, True),
                         ("180-degree rotation", True, True)):
    for _deg, _sx, _sy in ((0.0, 0.0, 0.0), (-10.0, 0.0, 0.0), (10.0, 0.0, 0.0), (-20.0, 0.0, 0.0),
                           (20.0, 0.0, 0.0), (-30.0, 0.0, 0.0), (30.0, 0.0, 0.0), (0.0, 0.25, 0.0),
                           (0.0, -0.25, 0.0), (0.0, 0.0, 0.25), (0.0, 0.0, -0.25)):
        if not (_fh or _fv or _deg or _sx or _sy):
            continue  # the identity
        _parts = [p for p in (_fname, f"rotation by {_deg:g} degrees" if _deg else "",
                              "shift by an eighth of the side" if (_sx or _sy) else "") if p]
        _TRANSFORMS.append((" + ".join(_parts), _fh, _fv, _deg, _sx, _sy))


def dense_input(tgt: torch.Tensor, args: tuple[Any, ...], kwargs: dict[str, Any],
                pred: Any = None) -> torch.Tensor | None:
    """The model's input that `tgt` is a dense target of: a float tensor with the target's batch
    size and spatial dims (the last two), at most `_MAX_CHANNELS` channels. The call must have
    made the loss's prediction `pred`: a call that took the prediction as an argument (a
    discriminator or a critic scoring the generator's output, a second model stacked on the
    first) did not, and its inputs are not what the target is a map of."""
    if not is_dense_target(tgt):
        return None
    if isinstance(pred, torch.Tensor) and any(isinstance(a, torch.Tensor) and same_storage(a, pred)
                                              for a in (*args, *kwargs.values())):
        return None
    n, hw = tgt.shape[0], tuple(tgt.shape[-2:])
    for x in (*args, *kwargs.values()):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dim() in (3, 4) and x.shape[0] == n \
                and tuple(x.shape[-2:]) == hw and (x.dim() == 3 or x.shape[1] <= _MAX_CHANNELS) \
                and x.device == tgt.device and x is not tgt:
            return x
    return None


def is_dense_target(tgt: Any) -> bool:
    """(N, H, W) class indices or (N, 1, H, W); a float map (N, H, W) or (N, C ≤ 4, H, W)."""
    if not isinstance(tgt, torch.Tensor) or tgt.dim() not in (3, 4) or tgt.shape[0] < 4 or tgt.is_complex():
        return False
    if min(tgt.shape[-2:]) < 8 or tgt.dtype == torch.bool:
        return False
    if is_index_tensor(tgt):
        return tgt.dim() == 3 or tgt.shape[1] == 1
    return tgt.is_floating_point() and (tgt.dim() == 3 or tgt.shape[1] <= 4)


def _regions(tgt: torch.Tensor, step: int) -> torch.Tensor | None:
    """One-hot regions (N, K, h, w) of the target, subsampled by `step`."""
    t = tgt.detach()
    if t.dim() == 4:
        t = t.float().mean(1) if t.is_floating_point() else t[:, 0]
    t = t[:, ::step, ::step]
    n = t.shape[0]
    if t.is_floating_point():
        flat = t.reshape(n, -1).float()
        qs = torch.linspace(0, 1, _BANDS + 1, device=t.device)[1:-1]
        edges = torch.quantile(flat, qs, dim=1).T  # (N, B - 1)
        ids = (flat[:, :, None] > edges[:, None, :]).sum(-1).reshape(t.shape)
        k = _BANDS
    else:
        values, ids = torch.unique(t, return_inverse=True)
        k = int(values.numel())  # the one sync (warm-up only)
        if k < 2 or k > _MAX_CLASSES:
            return None
    return F.one_hot(ids.long(), k).permute(0, 3, 1, 2).float()


def _r2(m: torch.Tensor, x: torch.Tensor, cover: torch.Tensor) -> torch.Tensor:
    """Per sample, the share of the variance of x (N, C, P) over the covered pixels that the
    regions m (N, K, P) explain."""
    nk = m.sum(2)
    s = torch.einsum("nkp,ncp->nkc", m, x)
    between = ((s * s).sum(2) / nk.clamp(min=1)).sum(1)
    q = torch.einsum("np,ncp->n", cover, x * x)
    mean = torch.einsum("np,ncp->nc", cover, x)
    total = q - (mean * mean).sum(1) / cover.sum(1).clamp(min=1)
    return 1 - (q - between) / total.clamp(min=1e-12)


def _grid(n: int, hw: tuple[int, int], t: tuple[str, bool, bool, float, float, float],
          device: torch.device) -> torch.Tensor:
    _, fh, fv, deg, sx, sy = t
    a = math.radians(deg)
    theta = torch.tensor([[math.cos(a) * (-1 if fh else 1), -math.sin(a), sx],
                          [math.sin(a), math.cos(a) * (-1 if fv else 1), sy]], dtype=torch.float32, device=device)
    return F.affine_grid(theta[None].expand(n, 2, 3), [n, 1, *hw], align_corners=False)


def _corr(a: torch.Tensor, b: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """sum_p a(p) b(p - s) for every shift s (index s modulo `size`), over the broadcast dims."""
    return torch.fft.irfft2(torch.fft.rfft2(a, s=size) * torch.fft.rfft2(b, s=size).conj(), s=size)


def shift_scan(x: torch.Tensor, tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Per sample (the first `_SCAN_SAMPLES`): the best gain in R² of the target moved by an
    integer shift over the given one (on the moved target's cover, at least `_COVER` of the
    pixels), the moved target's R² there, and the best gain at shifts more than `_PEAK` pixels
    away from that one."""
    h, w = x.shape[-2:]
    step = max(1, math.ceil(max(h, w) / _SCAN_SIDE))
    m = _regions(tgt[:_SCAN_SAMPLES], step)
    if m is None:
        return None
    xs = x.detach()[:_SCAN_SAMPLES].float()
    if xs.dim() == 3:
        xs = xs[:, None]
    xs = xs[:, :, ::step, ::step]
    hh, ww = xs.shape[-2:]
    xs = xs - xs.mean((2, 3), keepdim=True)
    xs = xs / xs.flatten(1).std(1).clamp(min=1e-12)[:, None, None, None]
    size = (2 * hh, 2 * ww)
    ones = torch.ones(1, 1, hh, ww, device=xs.device)
    moved = _corr(xs[:, None], m[:, :, None], size)  # (N, K, C, ...): region k moved by s, against x
    n_moved = _corr(ones[:, None], m[:, :, None], size)[:, :, 0].round()  # its pixels still inside
    kept = _corr(m[:, :, None] * xs[:, None], ones[:, None], size)  # region k in place, on the cover
    n_kept = _corr(m, ones, size).round()
    q = _corr((xs * xs).sum(1, keepdim=True), ones, size)[:, 0]
    mu = _corr(xs, ones, size)
    cover = _corr(ones, ones, size)[0, 0].round()
    mean2 = (mu * mu).sum(1) / cover.clamp(min=1)
    total = (q - mean2).clamp(min=1e-9)
    r2 = (torch.where(n_moved > 0, (moved * moved).sum(2) / n_moved.clamp(min=1), 0).sum(1) - mean2) / total
    r2_given = (torch.where(n_kept > 0, (kept * kept).sum(2) / n_kept.clamp(min=1), 0).sum(1) - mean2) / total
    # (a cover the input is flat on, a masked autoencoder's blanked patches, has no variance to explain)
    usable = (cover >= _COVER * hh * ww) & (total >= 0.1 * cover)
    usable[0, 0] = False  # the identity
    gain = torch.where(usable, r2 - r2_given, torch.full_like(r2, -1.0))
    best, at = gain.flatten(1).max(1)
    fit = r2.flatten(1).gather(1, at[:, None])[:, 0]
    dy = torch.arange(size[0], device=xs.device)
    dy = torch.where(dy >= hh, dy - size[0], dy)
    dx = torch.arange(size[1], device=xs.device)
    dx = torch.where(dx >= ww, dx - size[1], dx)
    by, bx = dy[at // size[1]], dx[at % size[1]]
    far = ((dy[None, :, None] - by[:, None, None]).abs() > _PEAK) \
        | ((dx[None, None, :] - bx[:, None, None]).abs() > _PEAK)
    second = torch.where(far, gain, torch.full_like(gain, -1.0)).flatten(1).max(1).values
    return best, fit, second


def misaligned_plan(x: torch.Tensor, tgt: torch.Tensor) -> Plan | None:
    """Do many samples' targets explain their inputs better once flipped, rotated or shifted?"""
    h, w = x.shape[-2:]
    step = max(1, math.ceil(max(h, w) / _SIDE))
    m = _regions(tgt[:_SAMPLES], step)
    if m is None:
        return None
    xs = x.detach()[:_SAMPLES].float()
    if xs.dim() == 3:
        xs = xs[:, None]
    xs = xs[:, :, ::step, ::step]
    n, c, hh, ww = xs.shape
    xs = xs - xs.mean((2, 3), keepdim=True)
    xs = (xs / xs.flatten(1).std(1).clamp(min=1e-12)[:, None, None, None]).reshape(n, c, -1)
    mp = m.reshape(n, m.shape[1], -1)
    ones = torch.ones(n, hh * ww, device=xs.device)
    r2_id = _r2(mp, xs, ones)
    gaps, fits = [], []
    for t in _TRANSFORMS:
        moved = F.grid_sample(m, _grid(n, (hh, ww), t, m.device), mode="nearest", padding_mode="zeros",
                              align_corners=False).reshape(n, m.shape[1], -1)
        cover = moved.sum(1)
        enough = cover.mean(1) >= _COVER
        r2_t = _r2(moved, xs, cover)
        r2_given = _r2(mp * cover[:, None], xs, cover)
        gaps.append(torch.where(enough, r2_t - r2_given, torch.full_like(r2_t, -1.0)))
        fits.append(r2_t)
    gap = torch.stack(gaps, 1)  # (N, T)
    fit = torch.stack(fits, 1)
    best_gap, best = gap.max(1)
    best_fit = fit.gather(1, best[:, None])[:, 0]
    flagged = (best_gap >= _GAP) & (best_fit >= _FIT)
    votes = torch.bincount(best[flagged], minlength=len(_TRANSFORMS))
    orient = torch.tensor([int(t[1]) + 2 * int(t[2]) for t in _TRANSFORMS], device=votes.device)
    by_orientation = torch.zeros(4, device=votes.device, dtype=votes.dtype).index_add_(0, orient, votes)
    aligned = ((r2_id >= _ALIGNED) & ~flagged).sum()
    nf = flagged.sum()
    values = [nf.float(), votes.argmax().float(), votes.max().float(),
              (best_gap * flagged).sum() / nf.clamp(min=1), (r2_id * flagged).sum() / nf.clamp(min=1),
              (best_fit * flagged).sum() / nf.clamp(min=1), r2_id.mean(), by_orientation.max().float(),
              aligned.float()]
    scan = shift_scan(x, tgt)
    if scan is not None:
        s_gain, s_fit, s_second = scan
        shifted = (s_gain >= _GAP) & (s_fit >= _FIT)
        ns = shifted.sum()
        values += [ns.float(), torch.full((), float(s_gain.numel()), device=ns.device),
                   (s_gain * shifted).sum() / ns.clamp(min=1),
                   (s_fit * shifted).sum() / ns.clamp(min=1),
                   (s_second.clamp(min=0) / s_gain.clamp(min=1e-6) * shifted).sum() / ns.clamp(min=1)]

    def judge(v: list[float]) -> Verdict | None:
        count, top, top_n, mean_gap, fit_given, fit_moved, fit_all, agree, aligned_n = v[:9]
        one = count >= max(_MIN_SAMPLES, _SHARE * n) and fit_moved >= _RESTORED \
            and (aligned_n >= _MIN_ALIGNED or agree >= _AGREE * count)
        # (else no transform restores the pairing, the input is no moved copy of the target; or no
        # sample lines up as given and no one orientation: shifted copies mixed)
        if not one:
            return _per_sample(v[9:])
        name = _TRANSFORMS[int(top)][0]
        return dict(name="target_misaligned", family="data", severity=Severity.WARNING, stage=Stage.DATA,
                    samples=int(count), n=n, transform=name,
                    evidence={"input_shape": shape(x), "target_shape": shape(tgt), "samples_misaligned": int(count),
                              "samples_measured": n, "most_common_transform": name, "samples_with_it": int(top_n),
                              "explained_variance_given": round(fit_given, 3),
                              "explained_variance_moved": round(fit_moved, 3),
                              "mean_gain": round(mean_gap, 3),
                              "explained_variance_given_all_samples": round(fit_all, 3),
                              "samples_aligned_as_given": int(aligned_n),
                              "samples_with_one_orientation": int(agree)})

    def _per_sample(w: list[float]) -> Verdict | None:
        if not w:
            return None
        count, measured, gain, fit, second = w
        if count < max(_MIN_SAMPLES, _MOST * measured) or second > _SECOND:
            return None
        name = _PER_SAMPLE
        return dict(name="target_misaligned", family="data", severity=Severity.WARNING, stage=Stage.DATA,
                    samples=int(count), n=int(measured), transform=name,
                    evidence={"input_shape": shape(x), "target_shape": shape(tgt), "samples_misaligned": int(count),
                              "samples_measured": int(measured), "most_common_transform": name,
                              "explained_variance_moved": round(fit, 3), "mean_gain": round(gain, 3),
                              "second_peak_share": round(second, 3)})

    return Plan(values, judge)


_PER_SAMPLE = ("different shift for each sample (a random crop or shift drawn separately for the input and "
               "its target)")
