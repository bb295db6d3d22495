"""`SyncCounter`: counts the calls torchtriage makes that would make the host wait for a CUDA
device (see tests/test_host_syncs.py for the rule)."""

from __future__ import annotations

import os
import sys

import torch
from torch.overrides import TorchFunctionMode

import torchtriage

_PKG = os.path.dirname(os.path.abspath(torchtriage.__file__)) + os.sep
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_T = torch.Tensor
_SYNCING = {
    _T.item, _T.tolist, _T.__bool__, _T.__float__, _T.__int__, _T.__index__, _T.numpy, _T.cpu,
    _T.nonzero, torch.nonzero, torch.equal, _T.equal, torch.allclose, _T.allclose,
    _T.__repr__, _T.__str__, _T.__format__, torch.masked_select, _T.masked_select, torch.unique, _T.unique,
}
# torchtriage's reader of CPU tensors only (it refuses any other device): never a device read.
_HOST_ONLY = "read_host_scalars"
# torchtriage wrappers that call the wrapped torch function: that function's syncs are its own.
_PASS_THROUGH = {"scale", "step", "backward", "loss", "wrapped", "__init__"}


def _sync_name(func, args, kwargs) -> str | None:
    if func in _SYNCING:
        return func.__name__
    if func is _T.to:
        for a in (*args[1:], *kwargs.values()):
            if isinstance(a, (str, torch.device)) and torch.device(a).type == "cpu":
                return "to(cpu)"
    if func in (_T.__getitem__, _T.__setitem__) and len(args) > 1:
        index = args[1] if isinstance(args[1], tuple) else (args[1],)
        if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index):
            return "bool-mask index"
    return None


class SyncCounter(TorchFunctionMode):
    """Records (what, torchtriage's frames calling it) for each would-be sync torchtriage makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _sync_name(func, args, kwargs)
        if name is not None:
            f, via_torch = sys._getframe(1), False
            while f is not None and (f.f_code.co_filename.startswith(_TORCH) or
                                     f.f_code.co_name == "__torch_function__"):
                via_torch |= f.f_code.co_filename.startswith(_TORCH)
                f = f.f_back
            ours = f is not None and f.f_code.co_filename.startswith(_PKG) and f.f_code.co_name != _HOST_ONLY
            if ours and not (via_torch and f.f_code.co_name in _PASS_THROUGH):
                chain = []
                while f is not None and f.f_code.co_filename.startswith(_PKG) and len(chain) < 6:
                    chain.append(f"{os.path.relpath(f.f_code.co_filename, _PKG)}:{f.f_code.co_name}")
                    f = f.f_back
                self.calls.append((name, tuple(chain)))
        return func(*args, **kwargs)
