"""One-line, verifiable tensor evidence: shape, dtype, device, layout, NaN/±Inf counts, finite range.

Summaries read the tensor's values, so they cost a host sync: build them only on the report
path (after something tripped), never in a hot hook.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch


@dataclasses.dataclass(frozen=True)
class TensorSummary:
    """What a user can check by hand: `print(t.shape, t.dtype, t.device)` and counts."""

    shape: tuple[int, ...]
    dtype: str
    device: str
    contiguous: bool
    numel: int
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    min: float | None = None
    max: float | None = None
    requires_grad: bool = False
    stride: tuple[int, ...] | None = None

    @property
    def finite(self) -> bool:
        return self.nan == 0 and self.posinf == 0 and self.neginf == 0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["shape"] = list(self.shape)
        d["stride"] = list(self.stride) if self.stride is not None else None
        return d

    def __str__(self) -> str:
        parts = [f"{_dtype_name(self.dtype)}{list(self.shape)}", self.device]
        if not self.contiguous:
            parts.append("non-contiguous")
        if self.nan:
            parts.append(f"NaN={self.nan}")
        if self.posinf:
            parts.append(f"+Inf={self.posinf}")
        if self.neginf:
            parts.append(f"-Inf={self.neginf}")
        if self.min is not None and self.max is not None:
            parts.append(f"finite min={self.min:.4g} max={self.max:.4g}")
        elif self.numel and self.nan + self.posinf + self.neginf == self.numel:
            parts.append("no finite value")
        return " ".join(parts)


def _dtype_name(dtype: str) -> str:
    return dtype.replace("torch.", "")


@torch.no_grad()
def summarize(t: Any) -> TensorSummary | None:
    """Summarize a tensor (None for anything else). Never raises on odd tensors."""
    if not isinstance(t, torch.Tensor):
        return None
    try:
        base: dict[str, Any] = dict(
            shape=tuple(t.shape),
            dtype=str(t.dtype),
            device=str(t.device),
            contiguous=bool(t.is_contiguous()) if t.layout == torch.strided else False,
            numel=t.numel(),
            requires_grad=bool(t.requires_grad),
            stride=tuple(t.stride()) if t.layout == torch.strided else None,
        )
    except Exception:  # sparse / nested / fake tensors: keep what we can
        return TensorSummary(shape=tuple(getattr(t, "shape", ())), dtype=str(t.dtype),
                             device=str(t.device), contiguous=False, numel=0)
    if t.device.type == "meta" or t.numel() == 0 or t.layout != torch.strided:
        return TensorSummary(**base)
    try:
        return _with_values(t, base)
    except Exception:  # the values could not be read (out of memory, a broken device): metadata only
        return TensorSummary(**base)


def _with_values(t: torch.Tensor, base: dict[str, Any]) -> TensorSummary:
    # One host read per tensor (on CUDA each read waits for the device): counts and the finite
    # range are reduced on the device and read together, without a boolean-mask compaction.
    x = t.detach()
    wide = torch.float32 if x.device.type == "mps" else torch.float64  # MPS has no float64
    if x.is_complex():
        x = torch.view_as_real(x)
    if not (x.is_floating_point()):
        if x.dtype == torch.bool:
            x = x.to(torch.uint8)
        lo, hi = torch.stack([x.min().to(wide), x.max().to(wide)]).tolist()
        return TensorSummary(**base, min=lo, max=hi)
    nan = torch.isnan(x)
    posinf = torch.isposinf(x)
    neginf = torch.isneginf(x)
    finite = ~(nan | posinf | neginf)
    parts = [nan.sum(), posinf.sum(), neginf.sum(), finite.sum(),
             torch.where(finite, x, float("inf")).amin(), torch.where(finite, x, float("-inf")).amax()]
    counts = torch.stack([p.to(wide) for p in parts]).tolist()
    lo, hi = (counts[4], counts[5]) if counts[3] else (None, None)
    return TensorSummary(**base, nan=int(counts[0]), posinf=int(counts[1]), neginf=int(counts[2]),
                         min=lo, max=hi)


def describe(t: Any) -> str:
    """The summary as one line, or the object's type for non-tensors."""
    s = summarize(t)
    return str(s) if s is not None else type(t).__name__
