"""A small reader/writer of the safetensors format, so that bundles never hold a pickle.

The format (https://github.com/huggingface/safetensors, "Format" section):

    8 bytes   N, the header length, unsigned little-endian
    N bytes   a JSON object: name -> {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
              plus an optional "__metadata__": {str: str}
    rest      the raw little-endian bytes of every tensor, offsets relative to the end of the header

Reading is pure parsing: nothing in the file can make Python run code. Every check a
malicious or truncated file could fail (header length, JSON, dtype, shape against byte
count, offsets in bounds and non-overlapping) raises `BundleError` naming the file.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping

import numpy as np
import torch

from .._errors import BundleError

# safetensors dtype codes <-> torch dtypes (the ones a training step can hold).
_CODES: dict[torch.dtype, str] = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
_DTYPES = {v: k for k, v in _CODES.items()}
_MAX_HEADER = 100 * 1024 * 1024  # the reference implementation's bound


def supported(t: torch.Tensor) -> bool:
    """True when `t` can be stored (a dense tensor of a listed dtype)."""
    return isinstance(t, torch.Tensor) and t.layout is torch.strided and t.dtype in _CODES


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _to_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    if t.numel() == 0:
        return b""
    # View as bytes through torch (numpy has no bfloat16); the host is little-endian.
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def save(tensors: Mapping[str, torch.Tensor], path: str | os.PathLike[str],
         metadata: Mapping[str, str] | None = None) -> int:
    """Write `tensors` to `path`; returns the file size in bytes."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs: list[bytes] = []
    offset = 0
    for name, t in tensors.items():
        if not supported(t):
            raise TypeError(f"cannot store tensor {name!r} of dtype {t.dtype} / layout {t.layout}")
        data = _to_bytes(t)
        header[name] = {"dtype": _CODES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # align the data section to 8 bytes, as the reference does
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for b in blobs:
            fh.write(b)
    return 8 + len(raw) + offset


def load(path: str | os.PathLike[str]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Read a safetensors file: (name -> CPU tensor, metadata). Raises `BundleError`."""
    path = os.fspath(path)
    name = os.path.basename(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise BundleError(f"{name}: cannot read ({e.strerror})", path) from None
    if len(data) < 8:
        raise BundleError(f"{name}: not a safetensors file (only {len(data)} bytes)", path)
    (n,) = struct.unpack("<Q", data[:8])
    if n > _MAX_HEADER or 8 + n > len(data):
        raise BundleError(f"{name}: not a safetensors file (header length {n} exceeds the file)", path)
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"{name}: not a safetensors file (header is not JSON: {e})", path) from None
    if not isinstance(header, dict):
        raise BundleError(f"{name}: not a safetensors file (header is not a JSON object)", path)
    body = memoryview(data)[8 + n:]
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise BundleError(f"{name}: __metadata__ must map strings to strings", path)
    out: dict[str, torch.Tensor] = {}
    spans: list[tuple[int, int]] = []
    for key, info in header.items():
        try:
            dtype = _DTYPES[info["dtype"]]
            shape = [int(s) for s in info["shape"]]
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise BundleError(f"{name}: tensor {key!r} has an invalid entry {info!r}", path) from None
        size = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
        if min(shape, default=0) < 0 or not 0 <= begin <= end <= len(body) or end - begin != size:
            raise BundleError(f"{name}: tensor {key!r} does not fit the file "
                              f"(offsets {begin}..{end}, {len(body)} data bytes, {size} expected)", path)
        spans.append((begin, end))
        if size == 0:
            out[key] = torch.empty(shape, dtype=dtype)
            continue
        buf = bytearray(body[begin:end])  # a private, writable copy
        out[key] = torch.frombuffer(buf, dtype=torch.uint8).view(dtype).reshape(shape)
    spans.sort()
    for (_, e0), (b1, _) in zip(spans, spans[1:]):
        if b1 < e0:
            raise BundleError(f"{name}: tensors overlap in the data section", path)
    return out, {str(k): v for k, v in meta.items()}
