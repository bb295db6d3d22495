"""An output head that predicts over another number of classes than the vocabulary it feeds.

A model that feeds back the ids it predicts (sampling, argmax, autoregressive decoding) keeps
one invariant: the class axis of the logits it samples from (and that its loss reads) is as
wide as the input embedding those ids go back into has rows. When the head is wider (a bigram
table `nn.Embedding(vocab, 128)`, an `lm_head` of the wrong size, a decoder's `Linear(h, n)`
with `n` > its embedding's rows), the first predicted id past the last row raises
"index out of range in self" in the embedding: the data are fine, the head's width is not.

`HeadWidths` (kept by the triage check) records, per watched model, the class-axis width of its
last output (the first floating tensor of 2 or more dims it returned: its last dim) and of the
last classification loss's input after that model's forward (dim 1, or the only dim) — shapes
only, no value is read. `output_width_fields` is asked when an embedding refuses an id: when the
id is within the model's own output width, that width differs from the embedding's rows, no
embedding of the model has that many rows (a model with a second vocabulary of that size,
e.g. a decoder's, is consistent and the id is the data's), and that output is known for logits
(a class loss read that width) or the refused ids read as fed back (one position per row, or the
previous call's ids with one more), it is the head's width, not the data.

The other direction, a head narrower than the vocabulary, shows in training: `cross_entropy`
refuses a target past the logits' classes. `narrow_head_fields` reads it as the head's width when
the targets are the model's own input ids shifted by one position and its input embedding
has a row for the target; a tagger's or classifier's bad label stays `data.target_range`.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn as nn

# losses whose input holds one logit per class along dim 1 (or its only dim)
_CLASS_LOSSES = ("cross_entropy", "nll_loss")
_MAX_ITEMS = 8


def _first_logits(output: Any, depth: int = 0) -> torch.Tensor | None:
    """The first floating tensor with 2 or more dims in a model's output (tensor, tuple, list,
    dict / ModelOutput), shallow: its elements and theirs."""
    if isinstance(output, torch.Tensor):  # (nested / sparse layouts: no plain class axis)
        return output if output.layout == torch.strided and output.dim() >= 2 and output.is_floating_point() else None
    if depth >= 2:
        return None
    if isinstance(output, Mapping):
        items = list(itertools.islice(output.values(), _MAX_ITEMS))
    elif isinstance(output, (tuple, list)):
        items = list(output[:_MAX_ITEMS])
    else:
        return None
    for item in items:
        found = _first_logits(item, depth + 1)
        if found is not None:
            return found
    return None


class HeadWidths:
    """Per watched model: its last output's and its last class loss's class-axis widths."""

    def __init__(self) -> None:
        self._output: weakref.WeakKeyDictionary[nn.Module, tuple[int, list[int]]] = weakref.WeakKeyDictionary()
        self._loss: weakref.WeakKeyDictionary[nn.Module, tuple[int, list[int]]] = weakref.WeakKeyDictionary()
        self._last: weakref.ReferenceType[nn.Module] | None = None
        # the last watched call's first 2-D integer input (a reference: the batch's token ids)
        self.last_ids: tuple[weakref.ReferenceType[nn.Module], torch.Tensor] | None = None

    def calling(self, model: nn.Module) -> None:
        """`model` is called at the top level: a loss computed in its forward is its loss."""
        self._last = weakref.ref(model)

    def saw_output(self, model: nn.Module, output: Any, args: tuple[Any, ...] = ()) -> None:
        self._last = weakref.ref(model)
        ids = next((a for a in args if isinstance(a, torch.Tensor) and a.layout == torch.strided
                    and a.dim() == 2 and not a.is_floating_point() and not a.is_complex()), None)
        self.last_ids = (weakref.ref(model), ids) if ids is not None else None
        logits = _first_logits(output)
        if logits is not None:
            self._output[model] = (int(logits.shape[-1]), list(logits.shape))

    def saw_loss(self, name: str, logits: Any) -> None:
        model = self._last() if self._last is not None else None
        if model is None or name not in _CLASS_LOSSES or not isinstance(logits, torch.Tensor) \
                or logits.layout != torch.strided or not logits.is_floating_point() or logits.dim() == 0:
            return
        width = int(logits.shape[1] if logits.dim() >= 2 else logits.shape[0])
        self._loss[model] = (width, list(logits.shape))

    def width(self, model: nn.Module) -> tuple[int, list[int], str, bool] | None:
        """(width, shape, where it was read, whether a class loss read logits of that width): the
        model's last output, else its loss's input."""
        out = self._output.get(model)
        loss = self._loss.get(model)
        if out is not None:
            return out[0], out[1], "output", loss is not None and loss[0] == out[0]
        if loss is not None:
            return loss[0], loss[1], "loss", True
        return None

    def previous_ids(self, model: nn.Module) -> torch.Tensor | None:
        """The 2-D integer input of the last completed call, when that call was `model`'s."""
        if self.last_ids is None or self.last_ids[0]() is not model:
            return None
        return self.last_ids[1]


def fed_back(ids: torch.Tensor, previous: torch.Tensor | None) -> bool:
    """The ids read like a model's own predictions fed back: one position per row (step-wise
    decoding), or the previous call's ids with one more position (appended, or a window slid by one)."""
    if ids.dim() < 2 or ids.shape[-1] == 1:
        return True
    if previous is None or previous.dim() != ids.dim() or previous.shape[:-1] != ids.shape[:-1] \
            or previous.device != ids.device:
        return False
    if previous.shape[-1] == ids.shape[-1] - 1:
        return bool((ids[..., :-1] == previous).all())
    if previous.shape[-1] == ids.shape[-1]:
        return bool((ids[..., :-1] == previous[..., 1:]).all())
    return False


def output_width_fields(ctx: Any, emb: nn.Embedding, ids: torch.Tensor, top: Any) -> dict[str, Any] | None:
    """The fields of `shape.output_width_not_vocab` when the refused id `top` lies within the
    class axis of the embedding's own model's output, that axis is not its vocabulary, and the
    output is known for logits (a class loss read that width) or the ids read as fed back."""
    session = ctx.session
    if session is None or not isinstance(top, int) or top < emb.num_embeddings:
        return None
    check = session.checker("triage")
    widths = getattr(check, "head_widths", None)
    model = session.owner(emb)
    if not isinstance(widths, HeadWidths) or model is None:
        return None
    read = widths.width(model)
    if read is None:
        return None
    width, shape, where, confirmed = read
    if not top < width or width == emb.num_embeddings:
        return None
    if not confirmed and not fed_back(ids, widths.previous_ids(model)):
        return None  # a 2-D float output no loss read (features?) and ids not the model's own
    # a model with a vocabulary of that width (a decoder's embedding) predicts ids for it: the id
    # given to this other embedding is the data's (or the wiring's), not the head's width
    if any(isinstance(m, nn.Embedding) and m.num_embeddings == width for m in model.modules()):
        return None
    return {"num_embeddings": emb.num_embeddings, "max_index": top, "width": width,
            "width_shape": shape, "width_source": where}


# ---------------------------------------------------------------- a head narrower than the vocabulary
def _loss_frame_tensors(ctx: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(input, target) of the innermost `cross_entropy` / `nll_loss` frame (torch's own names)."""
    for f, _ in reversed(ctx.frames):
        if f.f_code.co_name in _CLASS_LOSSES:
            logits, target = f.f_locals.get("input"), f.f_locals.get("target")
            if isinstance(logits, torch.Tensor) and isinstance(target, torch.Tensor):
                return logits, target
    return None


def _model_inputs(ctx: Any, widths: HeadWidths | None) -> list[tuple[nn.Module, torch.Tensor]]:
    """Integer tensors a watched model was called with: the arguments of a watched model's
    forward on the stack (a loss computed inside it), then the last model call's recorded input."""
    session = ctx.session
    roots = {id(m): m for m in session.models}
    out: list[tuple[nn.Module, torch.Tensor]] = []
    for f, _ in reversed(ctx.frames):
        model = f.f_locals.get("self")
        if f.f_code.co_name != "forward" or id(model) not in roots:
            continue
        code = f.f_code
        for name in code.co_varnames[1: code.co_argcount + code.co_kwonlyargcount]:
            v = f.f_locals.get(name)
            if isinstance(v, torch.Tensor) and not v.is_floating_point() and v.dim() == 2:
                out.append((model, v))
    if widths is not None and widths.last_ids is not None:
        last, ids = widths.last_ids
        model = last()
        if model is not None:
            out.append((model, ids))
    return out


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return bool(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # a tensor without a plain storage
        return a is b


def _match(a: torch.Tensor, c: torch.Tensor) -> float:
    keep = a >= 0  # positions the loss ignores (-100) are skipped
    n = int(keep.sum())
    return int((a == c)[keep].sum()) / n if n else 0.0


def _shifted(ids: torch.Tensor, target: torch.Tensor) -> bool:
    """The targets are the inputs shifted by one position (`y = x[1:]`, or labels equal to the
    inputs shifted inside the model): at 90 % of the positions the loss reads, and far more than
    at the unshifted positions (labels compared with themselves, masks and constant runs match
    both ways)."""
    b, t = ids.shape
    if t < 2:
        return False
    if target.numel() == b * t:
        tgt = target.reshape(b, t)[:, :-1]
    elif target.numel() == b * (t - 1):
        tgt = target.reshape(b, t - 1)
    else:
        return False
    good, bad = _match(tgt, ids[:, 1:]), _match(tgt, ids[:, :-1])
    return good >= 0.9 and good - bad >= 0.2


def narrow_head_fields(ctx: Any, target: int) -> dict[str, Any] | None:
    """The fields of `shape.output_width_not_vocab` when a loss refuses target id `target` past its
    logits' classes, the targets are the model's own input ids shifted, and the model's input
    embedding has a row for it: the head is narrower than the vocabulary."""
    session = ctx.session
    if session is None:
        return None
    pair = _loss_frame_tensors(ctx)
    if pair is None:
        return None
    logits, tgt = pair
    if logits.dim() == 0 or tgt.device.type == "meta":
        return None
    width = int(logits.shape[1] if logits.dim() >= 2 else logits.shape[0])
    if not target >= width:
        return None
    check = session.checker("triage")
    widths = getattr(check, "head_widths", None)
    for model, ids in _model_inputs(ctx, widths if isinstance(widths, HeadWidths) else None):
        # the labels themselves (a view of the target; negative ignored positions), masks and
        # segment ids (all below the head's width) are not the token ids the vocabulary is about
        if not ids.numel() or ids.device != tgt.device or _same_storage(ids, tgt) \
                or int(ids.min()) < 0 or int(ids.max()) < width or not _shifted(ids, tgt):
            continue
        embs = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Embedding)]
        if any(m.num_embeddings == width for _, m in embs):
            return None
        top = max(int(ids.max()), target)
        fit = [(n, m) for n, m in embs if m.num_embeddings > top]
        if not fit:
            return None
        name, emb = fit[0]
        return {"num_embeddings": emb.num_embeddings, "max_index": target, "width": width,
                "width_shape": list(logits.shape), "embedding": session.module_name(emb) or name}
    return None
