"""Nested Python values (a batch, an optimizer state_dict) as JSON + named tensors.

`encode(obj, prefix, tensors)` returns a JSON-able spec and adds every tensor it meets to
`tensors` under a name starting with `prefix`; `decode(spec, tensors)` rebuilds the value.
Only plain data is kept: tensors, numbers, strings, None, lists, tuples, dicts (str or int
keys). Anything else (a custom object in the batch) is recorded by its type name and comes
back as None, and `decode` never imports or calls anything named in the spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ._safetensors import supported


def encode_scalar(obj: Any) -> dict[str, Any] | None:
    """The spec of None, a bool, str, int or float (JSON has no nan/inf: a float is kept as
    its repr); None for anything else."""
    if obj is None or isinstance(obj, (bool, str)):
        return {"t": "value", "v": obj}
    if isinstance(obj, int):
        return {"t": "value", "v": int(obj)}
    if isinstance(obj, float):
        return {"t": "float", "v": repr(float(obj))}
    return None


def encode(obj: Any, prefix: str, tensors: dict[str, torch.Tensor], skipped: list[str] | None = None) -> Any:
    if isinstance(obj, torch.Tensor):
        if not supported(obj):
            if skipped is not None:
                skipped.append(f"{prefix} ({obj.dtype}, {obj.layout})")
            return {"t": "unsupported", "type": f"Tensor[{obj.dtype}]"}
        name = prefix
        i = 1
        while name in tensors:
            name, i = f"{prefix}~{i}", i + 1
        tensors[name] = obj.detach()
        return {"t": "tensor", "key": name, "requires_grad": bool(obj.requires_grad),
                "device": str(obj.device)}
    scalar = encode_scalar(obj)
    if scalar is not None:
        return scalar
    if isinstance(obj, (list, tuple)):
        kind = "tuple" if isinstance(obj, tuple) else "list"
        return {"t": kind, "items": [encode(v, f"{prefix}.{i}", tensors, skipped) for i, v in enumerate(obj)]}
    if isinstance(obj, Mapping) and all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in obj):
        return {"t": "dict", "items": [[k, encode(v, f"{prefix}.{k}", tensors, skipped)] for k, v in obj.items()]}
    if skipped is not None:
        skipped.append(f"{prefix} ({type(obj).__name__})")
    return {"t": "unsupported", "type": type(obj).__name__}


def decode(spec: Any, tensors: Mapping[str, torch.Tensor], device: str | torch.device | None = None,
           *, keep_cpu: bool = False) -> Any:
    """The value `spec` describes; tensors moved to `device` (with `keep_cpu`, except those
    recorded on the CPU)."""
    kind = spec.get("t") if isinstance(spec, dict) else None
    if kind == "tensor":
        t = tensors[spec["key"]]
        if device is None or (keep_cpu and str(spec.get("device", "")).startswith("cpu")):
            return t
        return t.to(device)
    if kind == "value":
        return spec["v"]
    if kind == "float":
        return float(spec["v"])
    if kind in ("list", "tuple"):
        items = [decode(s, tensors, device, keep_cpu=keep_cpu) for s in spec["items"]]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {k: decode(v, tensors, device, keep_cpu=keep_cpu) for k, v in spec["items"]}
    if kind == "unsupported":
        return None
    raise ValueError(f"unknown entry {spec!r}")


def keys(spec: Any) -> list[str]:
    """The tensor names a spec refers to."""
    kind = spec.get("t") if isinstance(spec, dict) else None
    if kind == "tensor":
        return [spec["key"]]
    if kind in ("list", "tuple"):
        return [k for s in spec["items"] for k in keys(s)]
    if kind == "dict":
        return [k for _, s in spec["items"] for k in keys(s)]
    return []


def map_tensors(obj: Any, fn: Any) -> Any:
    """`obj` with every tensor replaced by `fn(tensor)` (structure kept)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, tuple):
        return tuple(map_tensors(v, fn) for v in obj)
    if isinstance(obj, list):
        return [map_tensors(v, fn) for v in obj]
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    return obj
