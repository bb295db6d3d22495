"""`held_still`: a model called off the record (a probe's replay) and left exactly as it was.

One implementation for every probe that calls the user's model again on a copy of a batch
(`_batchmix`: samples that mix; `_pad_values`: padding that reaches real outputs)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn as nn

PARAM_COPY_MOST = 1 << 26  # parameter elements copied to restore values written through `.data`


@contextlib.contextmanager
def held_still(model: nn.Module, device: torch.device) -> Iterator[Any]:
    """Eval mode, no_grad, the session paused. Yields `rewind()`, called before each of the
    probe's calls and at the end: every module's attributes (`self.hidden = ...`), buffers
    (written in place: found by their version counters) and parameters (reassigned through
    `.data`, or written through it in place, as a momentum encoder updated inside forward: values
    copied back through `.data`, which leaves their version counters alone, for models up to
    PARAM_COPY_MOST elements) as they were, and the RNG streams (a sampling layer draws the same
    in each call)."""
    from .._session import current_session

    modules = list(model.modules())
    attrs = [(m, dict(m.__dict__), dict(m.named_buffers(recurse=False)), dict(m.named_parameters(recurse=False)))
             for m in modules]
    buffers = {id(b): (b, b.detach().clone()) for m in modules for b in m.buffers(recurse=False)}
    versions = {key: b._version for key, (b, _) in buffers.items()}
    params = list({id(p): p for p in model.parameters()}.values())
    small = sum(p.numel() for p in params) <= PARAM_COPY_MOST
    datas = [(p, p.data, p.detach().clone() if small else None) for p in params]
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    def rewind() -> None:
        with torch.no_grad():
            for m, inst, bufs, named in attrs:
                for key in [k for k in m.__dict__ if k not in inst]:
                    del m.__dict__[key]
                m.__dict__.update(inst)
                for name, t in (*bufs.items(), *named.items()):
                    if getattr(m, name, None) is not t:  # (a forward that reassigned one)
                        setattr(m, name, t)
            for bid, (buf, kept) in buffers.items():
                if buf._version != versions[bid]:  # written in place by a forward (no read: its version counter)
                    buf.copy_(kept)
                    versions[bid] = buf._version
            for p, data, saved in datas:
                if p.data.data_ptr() != data.data_ptr():
                    p.data = data
                if saved is not None:
                    p.data.copy_(saved)
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state(cuda_rng, device)

    sess = current_session()
    try:
        with torch.no_grad(), (sess.paused() if sess is not None else contextlib.nullcontext()):
            def before_call() -> None:
                rewind()
                model.eval()  # (the attributes put back hold the modes as they were)
            yield before_call
    finally:
        rewind()
