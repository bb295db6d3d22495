"""`PadAttention`: a sequence model that takes an `attention_mask` is called on a padded batch
without one.

The invariant: a sequence's outputs at its real positions do not depend on how much padding
its batch needed. A model whose forward accepts `attention_mask` and knows its pad token
(`config.pad_token_id`, or an `nn.Embedding(padding_idx=...)` inside it) called on right-padded
token ids with no mask lets every real token attend to the pad positions. What is measured:
the longest-padded row of the call replayed alone, trimmed to its real tokens, against the
same row padded (both in eval mode, no grad, the RNG untouched); outputs that differ at the
real positions are the harm. A causal model (real tokens never see later pads) measures no
difference and stays quiet.

Cost: hooks on the outermost such modules only, for their first `_CALLS` calls (one read of
the ids each, two replays of one row when padding is found), then removed.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from .._findings import Severity, Stage
from .._frames import user_frame_from_stack
from .._transparent import our_hook
from ._common import finding, first_tensor, shape

if TYPE_CHECKING:
    from .._session import Session

_CALLS = 4  # calls looked at per module
_TOL = 1e-4  # relative difference: float noise of a replay stays far below it


def _pad_id(module: nn.Module) -> int | None:
    pad = getattr(getattr(module, "config", None), "pad_token_id", None)
    if isinstance(pad, int) and not isinstance(pad, bool):
        return pad
    for m in module.modules():
        if isinstance(m, nn.Embedding) and m.padding_idx is not None:
            return int(m.padding_idx)
    return None


def _takes_mask(module: nn.Module) -> inspect.Signature | None:
    try:
        sig = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return None
    return sig if "attention_mask" in sig.parameters else None


class PadAttention:
    """Watches the mask-taking sequence modules of the watched models."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._handles: dict[int, Any] = {}
        self._calls: dict[int, int] = {}

    def watch(self, model: nn.Module) -> None:
        inside: set[int] = set()  # the modules of one already watched: it passes them its mask
        for m in model.modules():
            if len(self._handles) >= 8:
                break
            if id(m) in self._handles or id(m) in inside:
                continue
            sig = _takes_mask(m)
            pad = _pad_id(m) if sig is not None else None
            if sig is None or pad is None:
                continue
            inside.update(id(x) for x in m.modules())
            self._handles[id(m)] = m.register_forward_hook(our_hook(self._hook(sig, pad)), with_kwargs=True)

    def _hook(self, sig: inspect.Signature, pad: int) -> Any:
        def post(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            __tracebackhide__ = True
            if self.session.busy:
                return
            n = self._calls.get(id(module), 0) + 1
            self._calls[id(module)] = n
            if n >= _CALLS:
                self._unhook(module)
            try:
                self._judge(module, sig, pad, args, kwargs, output)
            except Exception as e:  # our bug: report it, the user's forward goes on
                self._unhook(module)
                self.session.internal_error("silent.pad_attended", e)
        return post

    def _unhook(self, module: nn.Module) -> None:
        h = self._handles.pop(id(module), None)
        if h is not None:
            h.remove()
            self._handles[id(module)] = None  # (not watched again)

    def _judge(self, module: nn.Module, sig: inspect.Signature, pad: int, args: tuple[Any, ...],
               kwargs: dict[str, Any], output: Any) -> None:
        try:
            bound = sig.bind_partial(*args, **kwargs).arguments
        except TypeError:
            return
        if bound.get("attention_mask") is not None:
            return
        tensors = [v for v in bound.values() if isinstance(v, torch.Tensor)]
        if len(tensors) != 1:
            return  # other inputs (labels, decoder ids, embeddings): a replay with the ids alone is not this call
        ids = tensors[0]
        out = first_tensor(output)
        if ids is None or ids.dtype in (torch.bool,) or ids.is_floating_point() or ids.dim() != 2 or ids.shape[1] < 2:
            return
        if not isinstance(out, torch.Tensor) or out.dim() < 2 or tuple(out.shape[:2]) != tuple(ids.shape):
            return
        real = (ids != pad).to(torch.int64)
        lengths = real.sum(1)
        # right padding: a row's real tokens are a prefix (its mask never rises again)
        rises = (real[:, 1:] > real[:, :-1]).any(1)
        ok = (~rises) & (lengths > 0)
        padded = ok & (lengths < ids.shape[1])
        n_padded = int(padded.sum())  # the one read of the call
        if n_padded == 0:
            return
        row = int(torch.where(padded, ids.shape[1] - lengths, -1).argmax())
        length = int(lengths[row])
        frame = user_frame_from_stack(2)
        alone, together = self._replay(module, ids[row:row + 1], length)
        if alone is None or together is None:
            return
        diff = float((alone.float() - together.float()).abs().amax())
        scale = float(alone.float().abs().amax())
        if not diff > _TOL * max(1.0, scale):
            return
        path = self.session.module_name(module)
        self.session.add(finding(
            "pad_attended", severity=Severity.WARNING, stage=Stage.FORWARD, frame=frame,
            module=path or type(module).__name__, step=self.session.step,
            where=path or "the model", model=type(module).__name__, pad=pad,
            evidence={"module": f"{path} ({type(module).__name__})" if path else type(module).__name__,
                      "pad_token_id": pad,
                      "input_shape": shape(ids), "padded_rows": n_padded,
                      "row_real_tokens": length, "row_padded_length": int(ids.shape[1]),
                      "max_abs_output_change": round(diff, 6), "output_max_abs": round(scale, 6)}))
        self._unhook(module)

    def _replay(self, module: nn.Module, row: torch.Tensor, length: int) -> tuple[Any, Any]:
        """The row's outputs at its real positions alone (trimmed) and padded, in eval mode."""
        modes = [(m, m.training) for m in module.modules()]
        rng = torch.get_rng_state()
        try:
            module.eval()
            with torch.no_grad(), self.session.paused():
                alone = first_tensor(module(row[:, :length]))
                together = first_tensor(module(row))
        except Exception:
            return None, None  # a model that needs more than its ids: not judged
        finally:
            for m, t in modes:
                m.training = t
            torch.set_rng_state(rng)
        if not isinstance(alone, torch.Tensor) or not isinstance(together, torch.Tensor):
            return None, None
        if alone.dim() < 2 or together.dim() < 2 or alone.shape[1] != length:
            return None, None
        return alone[0, :length], together[0, :length]

    def close(self) -> None:
        for h in self._handles.values():
            if h is not None:
                h.remove()
        self._handles.clear()
