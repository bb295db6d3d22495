"""A run's step record on disk (issue 28): `record.json` (the ops, curves, updates, seeds) and
`init.safetensors` (the weights at the first call, pickle-free, `_repro/_safetensors.py`).
Written by `torchtriage run --record DIR` and by each side of `torchtriage diff`; read back as
the reference side of a later diff."""

from __future__ import annotations

import json
import os
from typing import Any

import torch

from .._repro import _safetensors

SCHEMA = "torchtriage.steprecord/1"
RECORD = "record.json"
INIT = "init.safetensors"


def save_record(folder: str, record: dict[str, Any], init: dict[str, torch.Tensor]) -> None:
    os.makedirs(folder, exist_ok=True)
    tensors = {k: v for k, v in init.items() if _safetensors.supported(v)}
    _safetensors.save(tensors, os.path.join(folder, INIT))
    with open(os.path.join(folder, RECORD), "w", encoding="utf-8") as fh:
        json.dump(dict(record, schema=SCHEMA), fh, separators=(",", ":"))


def is_record(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, RECORD))


def load_record(folder: str) -> dict[str, Any]:
    """The record; raises ValueError with one line when the folder holds none we can read."""
    try:
        with open(os.path.join(folder, RECORD), encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{folder}: no readable step record ({e})") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise ValueError(f"{folder}: not a step record of schema {SCHEMA}")
    return record


def load_init(folder: str) -> dict[str, torch.Tensor]:
    path = os.path.join(folder, INIT)
    if not os.path.isfile(path):
        return {}
    tensors, _ = _safetensors.load(path)
    return tensors
