"""Read a W&B offline run back: the `.wandb` file is a LevelDB-style log of protobuf records
(7-byte file header, 32 KiB blocks, records split into FULL / FIRST / MIDDLE / LAST chunks)."""

from __future__ import annotations

import glob
import json
import struct
from typing import Any

BLOCK = 32768
HEADER = 7


def records(path: str) -> list[bytes]:
    with open(path, "rb") as fh:
        raw = fh.read()
    ident, magic, _version = struct.unpack("<4sHB", raw[:HEADER])
    assert (ident, magic) == (b":W&B", 0xBEE1), f"{path} is not a W&B run log"
    out, buf, pos = [], b"", HEADER
    while pos + HEADER <= len(raw):
        left = BLOCK - pos % BLOCK
        if left < HEADER:
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", raw[pos:pos + HEADER])
        if kind == 0 and n == 0:  # block padding
            pos += left
            continue
        data = raw[pos + HEADER:pos + HEADER + n]
        pos += HEADER + n
        if kind == 1:
            out.append(data)
        elif kind == 2:
            buf = data
        elif kind == 3:
            buf += data
        elif kind == 4:
            out.append(buf + data)
            buf = b""
    return out


def read_run(wandb_dir: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(history rows, summary) of the one offline run under `wandb_dir`."""
    from wandb.proto import wandb_internal_pb2

    (path,) = glob.glob(f"{wandb_dir}/wandb/offline-run-*/run-*.wandb")
    history: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    for data in records(path):
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "summary":
            for i in rec.summary.update:
                keys = [i.key] if i.key else list(i.nested_key)
                node = summary
                for k in keys[:-1]:
                    node = node.setdefault(k, {})
                node[keys[-1]] = json.loads(i.value_json)
    return history, summary
