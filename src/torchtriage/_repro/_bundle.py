"""The repro bundle on disk: a folder of JSON, text and safetensors files, and nothing else.

    manifest.json         format, torchtriage version, SHA-256 and size of every other file
    meta.json             command, trigger, batch / optimizer structure, what was skipped
    env.json, env.txt     `collect_env()` and its pasteable text
    traceback.txt         the full traceback (exception) or the detection stack (finding)
    report.json           the session's report at the time of the failure
    batch.safetensors     the root model's inputs and the loss targets of the failing step
    model.safetensors     every watched model's state_dict at the step's start
    optimizer.safetensors optimizer state tensors at the step's start (the rest is in meta.json)
    rng.safetensors       CPU (and CUDA) RNG states at the step's start

Opening a bundle runs no code: no pickle, no `torch.load`, no import of anything named in
it. Files that look like a pickle (by name or by their structure, `_pickle_scan.py`) make the whole bundle
refused; a file whose checksum differs from the manifest is named in the error.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any

import torch

from .._catalogue import msg
from .._errors import BundleError
from .._findings import Finding, Report
from ._safetensors import load as load_tensors
from ._safetensors import save as save_tensors
from ._tree import decode, keys

FORMAT = "torchtriage.bundle/1"
TENSOR_FILES = ("batch.safetensors", "model.safetensors", "optimizer.safetensors", "rng.safetensors")
JSON_FILES = ("meta.json", "env.json", "report.json")
TEXT_FILES = ("env.txt", "traceback.txt")
KNOWN_FILES = frozenset(TENSOR_FILES + JSON_FILES + TEXT_FILES)


def _version() -> str:
    from .. import __version__

    return __version__


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _looks_like_pickle(path: str) -> bool:
    from ._pickle_scan import looks_like_pickle

    return looks_like_pickle(path)


def write_files(path: str | os.PathLike[str], *, jsons: Mapping[str, Any], texts: Mapping[str, str],
                tensors: Mapping[str, Mapping[str, torch.Tensor]]) -> int:
    """Write a bundle folder (the manifest last, so a half-written bundle never verifies)."""
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    stale = os.path.join(path, "manifest.json")
    if os.path.exists(stale):
        os.remove(stale)
    files: dict[str, dict[str, Any]] = {}
    for name, obj in jsons.items():
        with open(os.path.join(path, name), "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=1, ensure_ascii=False, default=str)
    for name, text in texts.items():
        with open(os.path.join(path, name), "w", encoding="utf-8") as fh:
            fh.write(text)
    for name, group in tensors.items():
        save_tensors(group, os.path.join(path, name), metadata={"format": FORMAT})
    for name in [*jsons, *texts, *tensors]:
        full = os.path.join(path, name)
        files[name] = {"sha256": _sha256(full), "bytes": os.path.getsize(full)}
    manifest = {"format": FORMAT, "torchtriage": _version(), "files": files}
    with open(stale, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)
    return sum(f["bytes"] for f in files.values())


@dataclasses.dataclass
class ReplayBatch:
    """The failing step's inputs: `model(*args, **kwargs)`, and the loss calls' targets."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    losses: list[dict[str, Any]]  # {"name", "target", "args", "kwargs", "input_shape"}
    # the step's other inputs (targets, masks, weights): {"where", "file", "line", "shape", "tensor"}
    inputs: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def target(self) -> Any:
        """The first loss call's target (None when no loss was recorded)."""
        return self.losses[0]["target"] if self.losses else None


@dataclasses.dataclass
class Bundle:
    """A loaded repro bundle. Make one with `load_bundle(path)`."""

    path: str
    meta: dict[str, Any]
    env: dict[str, Any]
    report: Report
    traceback: str
    tensors: dict[str, dict[str, torch.Tensor]]  # file name -> tensors

    @property
    def trigger(self) -> dict[str, Any]:
        """What made the bundle: {"kind": "finding" | "exception", ...}."""
        return dict(self.meta.get("trigger") or {})

    @property
    def finding(self) -> Finding | None:
        f = self.trigger.get("finding")
        return Finding.from_dict(f) if f else None

    @property
    def skipped(self) -> list[dict[str, Any]]:
        return list(self.meta.get("skipped", []))

    def batch(self, device: str | torch.device | None = None) -> ReplayBatch:
        spec = self.meta.get("batch") or {}
        t = self.tensors.get("batch.safetensors", {})
        if "args" not in spec or any(k not in t for k in keys(spec)):
            raise BundleError(msg("repro.no_batch", path=self.path), self.path)
        # A step whose model ran on an accelerator and kept some tensors on the CPU meant it
        # (pack_padded_sequence's lengths, indices the model moves itself): those stay there.
        # A step recorded on a CPU-only run is moved whole to the replay's device.
        keep_cpu = not str(self.meta.get("model", {}).get("device", "cpu")).startswith("cpu")

        def dec(s: Any) -> Any:
            return decode(s, t, device, keep_cpu=keep_cpu)

        losses = []
        for lc in spec.get("losses", []):
            losses.append({"name": lc["name"], "target": dec(lc["target"]),
                           "args": dec(lc.get("args", {"t": "tuple", "items": []})),
                           "kwargs": dec(lc.get("kwargs", {"t": "dict", "items": []})),
                           "input_shape": lc.get("input_shape")})
        inputs = [dict(e, tensor=dec(e["tensor"])) for e in spec.get("inputs", [])
                  if all(k in t for k in keys(e["tensor"]))]
        return ReplayBatch(tuple(dec(spec["args"])), dict(dec(spec["kwargs"])), losses, inputs)

    def model_state(self, label: str | None = None) -> dict[str, torch.Tensor] | None:
        """The state_dict of the failing model (or of the model called `label`), or None."""
        models = self.meta.get("models", [])
        t = self.tensors.get("model.safetensors")
        if t is None or not models:
            return None
        label = label or self.meta.get("model", {}).get("label")
        entry = next((m for m in models if m["label"] == label), models[0] if len(models) == 1 else None)
        if entry is None:
            return None
        p = entry["prefix"]
        return {k[len(p):]: v for k, v in t.items() if k.startswith(p)}

    def optimizer_state(self, index: int = 0) -> dict[str, Any] | None:
        opts = self.meta.get("optimizers", [])
        t = self.tensors.get("optimizer.safetensors")
        if t is None or index >= len(opts):
            return None
        return decode(opts[index]["state"], t)

    def restore_rng(self) -> None:
        """Put the CPU (and CUDA) RNG back where they were at the failing step's start."""
        t = self.tensors.get("rng.safetensors", {})
        if "cpu" in t:
            torch.set_rng_state(t["cpu"].clone())
        # By device index ("cuda.10" after "cuda.9"). A machine with fewer (or more) GPUs than the
        # recording one gets the states of the devices both have: the failing step ran on the
        # first ones in the common one-process-per-GPU layout (CUDA_VISIBLE_DEVICES).
        cuda = sorted((int(k.split(".", 1)[1]), v) for k, v in t.items()
                      if k.startswith("cuda.") and k.split(".", 1)[1].isdigit())
        if cuda and torch.cuda.is_available():
            n = torch.cuda.device_count()
            for i, state in cuda:
                if i < n:
                    torch.cuda.set_rng_state(state.clone(), i)

    # ---------------------------------------------------------------- shrinking support
    @property
    def batch_size(self) -> int | None:
        """The leading dimension of the first input tensor (the samples shrink works on)."""
        first = self._first_input()
        return int(first.shape[0]) if first is not None and first.dim() >= 1 else None

    @property
    def seq_len(self) -> int | None:
        """Dimension 1 of the first input when it looks like a sequence batch, else None.

        Integer (token) inputs of 2+ dims and float inputs of 3+ dims count as sequences;
        a 2-D float input is a feature matrix whose columns must not be cut."""
        first = self._first_input()
        if first is None:
            return None
        floating = first.is_floating_point()
        if first.dim() >= 3 or (first.dim() == 2 and not floating):
            return int(first.shape[1])
        return None

    def _first_input(self) -> torch.Tensor | None:
        spec = self.meta.get("batch") or {}
        names = keys(spec.get("args", {})) + keys(spec.get("kwargs", {}))
        t = self.tensors.get("batch.safetensors", {})
        return t[names[0]] if names and names[0] in t else None

    def select(self, samples: list[int] | None = None, prefix: int | None = None) -> Bundle:
        """A copy whose batch keeps only `samples` (indices into the batch) and, for sequence
        batches, the first `prefix` positions. Model, optimizer and RNG state are shared."""
        n, length = self.batch_size, self.seq_len
        batch = dict(self.tensors.get("batch.safetensors", {}))
        if samples is not None and n is not None:
            idx = torch.tensor(sorted(samples), dtype=torch.long)
            batch = {k: (v.index_select(0, idx) if v.dim() >= 1 and v.shape[0] == n else v) for k, v in batch.items()}
        if prefix is not None and length is not None:
            batch = {k: (v[:, :prefix].contiguous() if v.dim() >= 2 and v.shape[1] == length else v)
                     for k, v in batch.items()}
        meta = json.loads(json.dumps(self.meta))
        base = dict(meta.get("shrunk") or {})
        original = base.get("samples_of_original")
        chosen = sorted(samples) if samples is not None else None
        if original is not None and chosen is not None:
            chosen = [original[i] for i in chosen]
        meta["shrunk"] = {
            "batch_size": base.get("batch_size", n),
            "seq_len": base.get("seq_len", length),
            "samples_of_original": chosen if chosen is not None else original,
            "prefix": prefix if prefix is not None else base.get("prefix"),
        }
        tensors = dict(self.tensors, **{"batch.safetensors": batch})
        return dataclasses.replace(self, meta=meta, tensors=tensors)

    def save(self, path: str | os.PathLike[str]) -> int:
        """Write this bundle (e.g. a shrunk one) to a new folder; returns its size in bytes."""
        env_txt = ""
        from .._env import format_env

        if self.env:
            env_txt = format_env(self.env)
        return write_files(path, jsons={"meta.json": self.meta, "env.json": self.env,
                                        "report.json": self.report.to_dict()},
                           texts={"env.txt": env_txt, "traceback.txt": self.traceback},
                           tensors={k: v for k, v in self.tensors.items() if k in TENSOR_FILES})


def load_bundle(path: str | os.PathLike[str], *, allow_other_version: bool = False) -> Bundle:
    """Open a repro bundle, verifying it first. Runs no code from the bundle.

    Arguments:
        path: the bundle folder (as written by `watch(..., bundle_dir=...)` / `run --bundle`).
        allow_other_version: accept a bundle written by another torchtriage version of the
            same bundle format (generated regression tests use this).

    Returns:
        A `Bundle`.

    Raises:
        BundleError: missing folder or file, other format or version, a checksum mismatch
            (the file is named), a pickle payload, a malformed safetensors file.

    Example:
        >>> b = torchtriage.load_bundle("bundle/")
        >>> b.trigger["code"], b.batch_size
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise BundleError(msg("repro.missing", path=path), path)
    if not os.path.isdir(path):
        raise BundleError(msg("repro.not_folder", path=path), path)
    for root, _, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            if _looks_like_pickle(full):
                raise BundleError(msg("repro.pickle", file=os.path.relpath(full, path), path=path), full)
    mpath = os.path.join(path, "manifest.json")
    if not os.path.exists(mpath):
        raise BundleError(msg("repro.no_manifest", path=path), mpath)
    manifest = _read_json(mpath)
    fmt, ver = manifest.get("format"), manifest.get("torchtriage")
    if fmt != FORMAT:
        raise BundleError(msg("repro.format", path=path, got=fmt, expected=FORMAT), mpath)
    if ver != _version() and not allow_other_version:
        raise BundleError(msg("repro.version", path=path, got=ver, expected=_version()), mpath)
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise BundleError(msg("repro.bad_manifest", path=path), mpath)
    for name, info in files.items():
        full = os.path.join(path, name)
        if name not in KNOWN_FILES:
            raise BundleError(msg("repro.unknown_file", file=name, path=path), full)
        if not os.path.exists(full):
            raise BundleError(msg("repro.file_missing", file=name, path=path), full)
        size = os.path.getsize(full)
        if size != info.get("bytes") or _sha256(full) != info.get("sha256"):
            raise BundleError(msg("repro.checksum", file=name, path=path, size=size, expected=info.get("bytes")), full)
    for required in ("meta.json", "report.json"):
        if required not in files:
            raise BundleError(msg("repro.file_missing", file=required, path=path), os.path.join(path, required))
    meta = _read_json(os.path.join(path, "meta.json"))
    env = _read_json(os.path.join(path, "env.json")) if "env.json" in files else {}
    try:
        report = Report.from_dict(_read_json(os.path.join(path, "report.json")))
    except (ValueError, TypeError) as e:
        raise BundleError(f"report.json: {e}", os.path.join(path, "report.json")) from None
    tb = ""
    if "traceback.txt" in files:
        with open(os.path.join(path, "traceback.txt"), encoding="utf-8") as fh:
            tb = fh.read()
    tensors = {name: load_tensors(os.path.join(path, name))[0] for name in TENSOR_FILES if name in files}
    return Bundle(path=path, meta=meta, env=env, report=report, traceback=tb, tensors=tensors)


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"{os.path.basename(path)}: not valid JSON ({e})", path) from None
