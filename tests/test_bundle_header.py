"""Bundle safety without false refusals (issue 10): a safetensors file is recognized by its
structure (8-byte little-endian header length, then a JSON header that fits the file), so a
header length whose low bytes read `80 02`..`80 05` (pickle's PROTO opcode) is not refused;
pickles of every protocol still are."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import struct

import pytest
import torch

import torchtriage
from test_repro import _train_with_poison
from torchtriage._repro import _safetensors
from torchtriage._repro._pickle_scan import looks_like_pickle

# Header lengths whose first two bytes collide with pickle's PROTO opcode (0x80, protocol 2..5),
# with 0, 1 and 2 higher bytes on top: 640, 896, ..., up to 2**17 + 0x580.
COLLIDING = [hi * 65536 + proto * 256 + 0x80 for hi in (0, 1, 2) for proto in (2, 3, 4, 5)]


def _safetensors_with_header_length(path, n: int, tensors: dict[str, torch.Tensor]) -> None:
    """A valid safetensors file whose header is exactly `n` bytes (JSON padded with spaces,
    as the format allows)."""
    _safetensors.save(tensors, path)
    with open(path, "rb") as fh:
        data = fh.read()
    (m,) = struct.unpack("<Q", data[:8])
    header = data[8:8 + m].rstrip(b" ")
    assert len(header) <= n
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", n) + header + b" " * (n - len(header)) + data[8 + m:])


@pytest.mark.parametrize("n", COLLIDING)
def test_safetensors_header_colliding_with_pickle_magic_is_not_a_pickle(tmp_path, n):
    path = tmp_path / "model.safetensors"
    tensors = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(3, dtype=torch.int64)}
    _safetensors_with_header_length(path, n, tensors)
    head = path.read_bytes()[:2]
    assert head == bytes([0x80, (n >> 8) & 0xFF])  # the bytes that used to be refused
    assert not looks_like_pickle(str(path))
    loaded, _ = _safetensors.load(path)
    assert all(torch.equal(loaded[k], v) for k, v in tensors.items())


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickles_of_every_protocol_are_refused(tmp_path, protocol):
    path = tmp_path / "notes.json"
    path.write_bytes(pickle.dumps({"a": [1, 2.5, "x"]}, protocol=protocol))
    assert looks_like_pickle(str(path))


def test_torch_save_and_fake_safetensors_are_refused(tmp_path):
    buf = io.BytesIO()
    torch.save({"x": torch.ones(1)}, buf)
    (tmp_path / "a.safetensors").write_bytes(buf.getvalue())  # zip container with a pickle inside
    # PROTO then a length that does not fit the file: not a safetensors header, a pickle.
    (tmp_path / "b.safetensors").write_bytes(pickle.dumps(list(range(100)), protocol=2))
    assert looks_like_pickle(str(tmp_path / "a.safetensors"))
    assert looks_like_pickle(str(tmp_path / "b.safetensors"))
    (tmp_path / "c.json").write_text(json.dumps({"a": 1}))
    (tmp_path / "d.txt").write_text("Traceback (most recent call last):\n")
    assert not looks_like_pickle(str(tmp_path / "c.json")) and not looks_like_pickle(str(tmp_path / "d.txt"))


def test_bundle_with_a_640_byte_header_loads(tmp_path, capsys):
    # The case: a bundle torchtriage wrote, whose model.safetensors header is 640 bytes.
    _train_with_poison(tmp_path / "b")
    capsys.readouterr()
    path = tmp_path / "b" / "model.safetensors"
    tensors, _ = _safetensors.load(path)
    _safetensors_with_header_length(path, 640, tensors)
    mpath = tmp_path / "b" / "manifest.json"
    manifest = json.loads(mpath.read_text())
    data = path.read_bytes()
    manifest["files"]["model.safetensors"] = {**manifest["files"]["model.safetensors"],
                                              "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    mpath.write_text(json.dumps(manifest))
    assert data[:2] == b"\x80\x02"
    b = torchtriage.load_bundle(tmp_path / "b")
    assert all(torch.equal(b.tensors["model.safetensors"][k], v) for k, v in tensors.items())
    assert os.path.exists(path)
