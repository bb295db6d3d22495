"""Sequence models: labels not shifted, PAD counted in the loss, attention that sees the future,
padding that leaks.

In a session, the token checks compare a `cross_entropy` target with the token ids the root
model was called with (`session.snapshot.args`), on the first steps only. The probes
`check_causal` and `check_padding` run the model themselves: they perturb tokens a correct
model must ignore and compare the logits it must keep.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn as nn

from .._catalogue import msg
from .._findings import Report, Severity, Stage
from .._frames import UserFrame, user_frame_from_stack
from ._causal_site import leak_tolerance, locate_leak
from ._common import finding, first_tensor, is_index_tensor, shape
from ._plans import Plan, Verdict, run_now

_SAME = 0.9  # share of target positions equal to the input at the same position


def _as_grid(target: torch.Tensor, ids: torch.Tensor) -> torch.Tensor | None:
    """The target laid out as the (B, T) token grid of `ids`, when it has as many positions."""
    if ids.dim() != 2 or target.numel() != ids.numel():
        return None
    return target.reshape(ids.shape)


def token_plans(target: Any, ids: Any, *, ignore_index: int = -100, reduction: str = "mean",
                attention_mask: Any = None, weighted: bool = False, second: Any = None,
                loss: str = "cross_entropy") -> list[Plan]:
    """Shift and PAD checks for a token-level `cross_entropy` target (no sync).

    `second` is another (B, T) integer tensor the model was called with (`model(src, tgt_in)`,
    `decoder_input_ids=`): either a 0/1 attention mask, or the sequence a decoder reads. In the
    second case the logits line up with that sequence, so the target is compared with it: a
    denoising or correction seq2seq has a target nearly equal to its source, correctly."""
    if not is_index_tensor(target):
        return []
    plans: list[Plan] = []
    grid = None
    if is_index_tensor(ids) and ids.dim() == 2 and ids.shape[1] > 1 and ids.device == target.device:
        grid = _as_grid(target, ids)
    if grid is not None:
        valid = grid != ignore_index
        same = ((grid == ids) & valid).sum()
        values = [same, valid.sum()]
        if is_index_tensor(second) and second.shape == ids.shape and second.device == ids.device:
            values += [((grid == second) & valid).sum(), ((second == 0) | (second == 1)).all()]

        def judge_shift(v: list[float]) -> Verdict | None:
            same_n, valid_n = v[:2]
            if len(v) == 4 and not v[3]:  # the model also reads a second token sequence: judge on it
                same_n = v[2]
            if valid_n < 2 or same_n / valid_n < _SAME:
                return None
            return dict(name="labels_not_shifted", severity=Severity.ERROR, loss=loss,
                        evidence={"input_ids_shape": shape(ids), "target_shape": shape(target),
                                  "positions_equal_to_input": f"{int(same_n)}/{int(valid_n)}"})

        plans.append(Plan(values, judge_shift))
    if reduction == "none" or weighted:
        return plans  # the user weighs or masks the per-token losses afterwards
    if grid is None and target.dim() == 2 and target.shape[1] > 2:
        grid = target
    known = ids
    if grid is None and is_index_tensor(ids) and ids.dim() == 2 and ids.shape[0] and target.dim() == 1 \
            and ids.device == target.device and target.numel() % ids.shape[0] == 0:
        # next-token labels flattened: (B * (T - s),) for inputs (B, T), aligned with ids[:, s:]
        width = target.numel() // ids.shape[0]
        if 1 <= ids.shape[1] - width <= 2:
            grid, known = target.reshape(ids.shape[0], width), ids[:, ids.shape[1] - width:]
    elif grid is not None and is_index_tensor(ids) and ids.dim() == 2 and grid.dim() == 2 \
            and grid.shape[0] == ids.shape[0] and 1 <= ids.shape[1] - grid.shape[1] <= 2:
        known = ids[:, ids.shape[1] - grid.shape[1]:]
    if grid is None or grid.dim() != 2 or grid.shape[1] < 3:
        return plans
    if is_index_tensor(attention_mask) or (
            isinstance(attention_mask, torch.Tensor) and attention_mask.dtype == torch.bool):
        if attention_mask.shape == grid.shape and attention_mask.device == grid.device:
            pad = (attention_mask == 0) & (grid != ignore_index)
            if is_index_tensor(ids) and ids.shape == grid.shape and ids.device == grid.device:
                # Read the labels, not only the inputs (issue 13): a masked-out position counts
                # only when its label is the PAD token the input holds there. An MLM collator's
                # random replacement can put the PAD id into the inputs at a labelled position
                # (and a mask computed as `ids != pad` then hides it): its label is the original
                # token, the loss is right.
                pad &= grid == ids

            def judge_mask(v: list[float]) -> Verdict | None:
                if v[0] < 1:
                    return None
                return dict(name="pad_in_loss", severity=Severity.ERROR, pad="masked positions",
                            evidence={"pad_targets_counted": f"{int(v[0])}/{int(v[1])}",
                                      "ignore_index": ignore_index})

            plans.append(Plan([pad.sum(), torch.tensor(float(grid.numel()), device=grid.device)], judge_mask))
            return plans
    # No mask: a PAD id shows as the most common value at the padded end of the rows (the last
    # position, or the first one for left padding), also frequent overall; when the input ids are
    # known, those target positions must also be padding in the input (a frequent real label,
    # like the "O" tag of NER, sits under varied input tokens).
    ids = known
    known_ids = is_index_tensor(ids) and ids.shape == grid.shape and ids.device == grid.device
    vals: list[torch.Tensor] = []
    for end, nxt in ((-1, -2), (0, 1)):
        edge = grid[:, end]
        cand = torch.mode(edge).values
        is_cand = grid == cand
        vals += [cand, cand != ignore_index, (edge == cand).float().mean(), (grid[:, nxt] == cand).float().mean(),
                 is_cand.float().mean()]
        if known_ids:
            ids_pad = torch.mode(ids[:, end]).values
            vals.append((is_cand & (ids == ids_pad)).sum().float() / is_cand.sum().clamp_min(1))
        else:
            # Without the input ids, padding shows by where it sits: in the run at that end of
            # each row (a frequent class of a multi-output target, such as per-edge congestion
            # classes, sits anywhere in the row).
            run = is_cand.flip(-1).cumprod(-1).flip(-1) if end == -1 else is_cand.cumprod(-1)
            vals.append((run.bool() & is_cand).sum().float() / is_cand.sum().clamp_min(1))

    def judge_pad(v: list[float]) -> Verdict | None:
        for left, side in ((False, v[:6]), (True, v[6:])):
            pad_id, counted_v, at_end, at_next, overall, placed = side
            if not counted_v or at_end < 0.5 or at_next < 0.25 or overall < 0.15:
                continue
            if placed < (0.6 if known_ids else 0.9):
                continue
            ev = {"pad_id": int(pad_id), "share_of_target_tokens": round(overall, 3),
                  ("rows_starting_with_pad" if left else "rows_ending_in_pad"): round(at_end, 3),
                  "ignore_index": ignore_index}
            return dict(name="pad_in_loss", severity=Severity.WARNING, pad=int(pad_id), evidence=ev)
        return None

    plans.append(Plan(vals, judge_pad))
    return plans


def check_token_shift(input_ids: torch.Tensor, labels: torch.Tensor, *, ignore_index: int = -100) -> Report:
    """Check that next-token labels are the inputs shifted by one position.

    Arguments:
        input_ids: the (B, T) token ids the model reads.
        labels: the targets given to the loss, as a (B, T) grid or flattened (B*T,).
        ignore_index: the label value the loss skips.

    Returns:
        A `Report` with `silent.labels_not_shifted` when most labels equal the input at the same
        position (the model learns to copy its input), else empty.

    Example:
        >>> ids = torch.randint(0, 50, (2, 8))
        >>> torchtriage.check_token_shift(ids, ids.clone()).primary.code
        'silent.labels_not_shifted'
    """
    for what, t in (("input_ids", input_ids), ("labels", labels)):
        if not is_index_tensor(t):
            raise TypeError(f"check_token_shift: {what} must be an integer tensor of token ids, got "
                            f"{type(t).__name__ if not isinstance(t, torch.Tensor) else t.dtype}")
    with torch.no_grad():
        plans = token_plans(labels, input_ids, ignore_index=ignore_index, reduction="none")
        return run_now(plans, frame=user_frame_from_stack(2), op="cross_entropy")


def _call(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor | None, *, native: bool = False) -> torch.Tensor:
    out = model(ids) if mask is None else model(ids, attention_mask=mask)
    t = first_tensor(out)
    if t is None:
        raise TypeError(f"the model returned {type(out).__name__}, with no logits tensor to compare")
    return t if native else t.float()


def _probe(model: nn.Module, fn: Any) -> Any:
    import contextlib

    from .._session import current_session

    was = model.training
    sess = current_session()
    try:
        model.eval()  # dropout would change logits between the two runs
        with torch.no_grad(), (sess.paused() if sess is not None else contextlib.nullcontext()):
            return fn()
    finally:
        model.train(was)


def _check_ids(input_ids: Any, where: str) -> None:
    if not is_index_tensor(input_ids) or input_ids.dim() != 2:
        got = (f"{input_ids.dtype} {list(input_ids.shape)}" if isinstance(input_ids, torch.Tensor)
               else type(input_ids).__name__)
        raise TypeError(f"{where}: input_ids must be a (batch, time) integer tensor, got {got}")


def check_causal(model: nn.Module, input_ids: torch.Tensor, *, position: int | None = None,
                 atol: float | None = None) -> Report:
    """Check that a causal model's outputs at a position ignore every later token.

    Arguments:
        model: a module called as `model(input_ids)`, returning logits (B, T, ...) (or an output
            with `.logits`, or a tuple whose first tensor is the logits).
        input_ids: (B, T) token ids, T >= 2.
        position: the last position that must be unaffected; default T // 2 - 1.
        atol: the largest change in logits tolerated; default: rounding at the logits' scale
            (4 units in the last place of their dtype times their largest magnitude).

    Returns:
        A `Report` with `silent.attention_sees_future` (the first position whose logits changed
        when only later tokens changed), or empty. The finding names the module and the line
        where the future first reached an earlier position (the attention's softmax, ...), found
        by running both inputs once more op by op; a leak inside a library module (an
        `nn.MultiheadAttention` called without a mask) names that module and the line that
        called `check_causal`. The model's train/eval mode is restored.

    Example:
        >>> torchtriage.check_causal(lm, torch.randint(0, 100, (2, 16))).ok
        True
    """
    _check_ids(input_ids, "check_causal")
    t = input_ids.shape[1]
    if t < 2:
        raise ValueError(f"check_causal needs at least 2 positions, got input_ids of shape {list(input_ids.shape)}")
    pos = t // 2 - 1 if position is None else position
    if not 0 <= pos < t - 1:
        raise ValueError(f"position={position} is outside 0..{t - 2} for input_ids of shape {list(input_ids.shape)}")
    return causal_report(model, input_ids, pos, atol, user_frame_from_stack(2))


@contextlib.contextmanager
def probe_state(model: nn.Module, device: torch.device) -> Iterator[None]:
    """Around a causal probe: the model's train/eval modes and the RNG streams (CPU, and the
    device's) as they were, whatever the probe did or raised."""
    modes = [(m, m.training) for m in model.modules()]
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    try:
        yield
    finally:
        for m, was in modes:
            m.training = was
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state(cuda_rng, device)


def causal_report(model: nn.Module, input_ids: torch.Tensor, pos: int, atol: float | None,
                  frame: UserFrame | None, names: nn.Module | None = None) -> Report:
    """`check_causal`'s work; `names`: the module whose submodule names the finding uses (the
    model itself unless `model` wraps it)."""
    lo, hi = int(input_ids.min()), int(input_ids.max())
    future = input_ids.clone()
    # Every later token changes, to a different valid id.
    future[:, pos + 1:] = torch.where(future[:, pos + 1:] == hi, torch.full_like(future[:, pos + 1:], lo),
                                      torch.full_like(future[:, pos + 1:], hi))

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        return _call(model, input_ids, None, native=True), _call(model, future, None, native=True)

    a, b = _probe(model, run)
    t = input_ids.shape[1]
    if a.dim() < 2 or a.shape[1] != t:
        raise ValueError(f"check_causal: the model's output {list(a.shape)} has no position axis of length {t} "
                         f"(dim 1) for input_ids of shape {list(input_ids.shape)}: call it so that it returns "
                         "an output per position")
    # rounding of the output's own dtype (a bfloat16 model's logits), the comparison in float32
    tol = leak_tolerance(a[:, : pos + 1]) if atol is None else atol
    a, b = a.float(), b.float()
    diff = (a[:, : pos + 1] - b[:, : pos + 1]).abs()
    per_pos = diff.reshape(diff.shape[0], diff.shape[1], -1).amax(dim=(0, 2))
    changed = (per_pos > tol).nonzero()
    if changed.numel() == 0:
        return Report()
    first = int(changed[0, 0])
    site = _probe(model, lambda: locate_leak(lambda x: model(x), names or model, input_ids, future, pos))
    ev: dict[str, Any] = {"first_changed_position": first, "perturbed_from": pos + 1,
                          "max_logit_change": float(f"{float(per_pos.max()):.6g}")}
    module, op = "", type(model).__name__
    if site is not None:
        module = site.module or ""
        ev["leaks_in"] = f"{site.op} ({module or '<root>'})"
        if site.frame is not None:
            frame, op = site.frame, site.op
    f = finding("attention_sees_future", stage=Stage.FORWARD, frame=frame, module=module,
                op=op, position=first, changed_from=pos + 1, evidence=ev)
    if site is not None and site.frame is not None:
        where = dict(op=site.op, module=module or "<root>")
        f = f.replace(cause=msg("silent.attention_sees_future.cause.site", **where),
                      next_check=msg("silent.attention_sees_future.next.site", **where))
    return Report((f,))


def check_padding(model: nn.Module, input_ids: torch.Tensor, pad_id: int,
                  attention_mask: torch.Tensor | None = None, *, atol: float = 1e-4) -> Report:
    """Check that the tokens at PAD positions do not change the outputs at the other positions.

    Arguments:
        model: called as `model(input_ids)`, or `model(input_ids, attention_mask=mask)` when a
            mask is given; returns logits (B, T, ...).
        input_ids: (B, T) token ids containing some `pad_id` positions.
        pad_id: the PAD token id.
        attention_mask: 1 for real tokens, 0 for PAD (passed to the model unchanged).
        atol: the largest change in logits tolerated.

    Returns:
        A `Report` with `silent.padding_leaks` when rewriting PAD positions changed a non-PAD
        position's output, else empty.

    Example:
        >>> ids = torch.tensor([[5, 6, 7, 0, 0]])
        >>> torchtriage.check_padding(model, ids, pad_id=0, attention_mask=(ids != 0).long()).ok
        True
    """
    _check_ids(input_ids, "check_padding")
    if not isinstance(pad_id, int):
        raise TypeError(f"check_padding: pad_id must be an int, got {type(pad_id).__name__}")
    pads = input_ids == pad_id
    if not bool(pads.any()):
        raise ValueError(f"check_padding: input_ids hold no pad_id={pad_id}; give a batch with padding")
    if bool(pads.all()):
        raise ValueError("check_padding: every position is PAD; give a batch with real tokens too")
    frame = user_frame_from_stack(2)
    other = int(input_ids[~pads][0])
    rewritten = torch.where(pads, torch.full_like(input_ids, other), input_ids)

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        return _call(model, input_ids, attention_mask), _call(model, rewritten, attention_mask)

    a, b = _probe(model, run)
    diff = (a - b).abs().reshape(a.shape[0], a.shape[1], -1).amax(dim=2)
    leak = diff.masked_fill(pads, 0.0)
    worst = float(leak.max())
    if worst <= atol:
        return Report()
    where = (leak > atol).nonzero()[0].tolist()
    return Report((finding("padding_leaks", stage=Stage.FORWARD, frame=frame, module="", op=type(model).__name__,
                           pad=pad_id, evidence={"pad_id": pad_id, "pad_positions": int(pads.sum()),
                                                 "first_changed": {"row": where[0], "position": where[1]},
                                                 "max_logit_change": round(worst, 6),
                                                 "attention_mask_given": attention_mask is not None}),))
