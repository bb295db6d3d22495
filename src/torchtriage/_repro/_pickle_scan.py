"""Is this file a pickle? Decided by structure, never by running it (issue 10).

A safetensors file starts with its header length as 8 little-endian bytes; a header of 640
bytes (0x280) begins `80 02`, exactly like a protocol-2 pickle's PROTO opcode, so the first
bytes alone refused valid bundles. A file is a safetensors file when those 8 bytes give a
length that fits the file and the header they delimit parses as a JSON object; only other
files are examined as pickles: a PROTO opcode (0x80, protocol 1-5), a zip container
(`torch.save`'s format, which holds a pickle), or — for small files — an opcode stream that
`pickletools` walks to its STOP without error (protocols 0 and 1, which have no PROTO).
"""

from __future__ import annotations

import json
import os
import pickletools
import struct

PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".bin", ".joblib", ".npy", ".npz", ".dill")
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors reference implementation's bound
_SMALL = 1 << 20  # files walked opcode by opcode (text files of a bundle are far smaller)


def is_safetensors(head: bytes, size: int) -> bool:
    """`head` (the file's first bytes, at least the whole header when it is one) is a
    safetensors header: a length that fits a file of `size` bytes, then a JSON object."""
    if len(head) < 8:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    if n < 2 or n > _MAX_HEADER or 8 + n > size or len(head) < 8 + n:
        return False
    try:
        return isinstance(json.loads(head[8:8 + n].decode("utf-8")), dict)
    except (UnicodeDecodeError, ValueError):
        return False


def is_pickle(data: bytes, size: int) -> bool:
    """`data` (the file's first bytes; all of it when `size` is small) holds a pickle."""
    if data[:4] == b"PK\x03\x04":
        return True
    if len(data) >= 2 and data[0] == 0x80 and 1 <= data[1] <= 5:
        return True
    if size > _SMALL or len(data) < size or not data:
        return False
    try:
        return any(op.name == "STOP" for op, _, _ in pickletools.genops(data))
    except Exception:  # not an opcode stream: not a pickle
        return False


def looks_like_pickle(path: str) -> bool:
    """A pickle payload by its name or its structure (a safetensors file never is one)."""
    if path.lower().endswith(PICKLE_SUFFIXES):
        return True
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) == 8:
                (n,) = struct.unpack("<Q", head)
                if 2 <= n <= _MAX_HEADER and 8 + n <= size:
                    head += fh.read(n)
                    if is_safetensors(head, size):
                        return False
            head += fh.read(max(0, min(size, _SMALL) - len(head)))
    except OSError:
        return False
    return is_pickle(head, size)
