"""`collect_env()`: the facts a bug report needs (seed G.1: keep the environment with the
failure), shared by repro bundles and `torchtriage env`.

Environment variables are limited to the families that change PyTorch's behaviour
(CUDA_*, TORCH_*, OMP_*, PYTORCH_*, plus NCCL_*, MKL_* and TORCHTRIAGE_*); values whose
name looks like a secret are replaced by "<redacted>", so the block is safe to paste.
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any

import torch

ENV_PREFIXES = ("CUDA_", "TORCH_", "OMP_", "PYTORCH_", "NCCL_", "MKL_", "TORCHTRIAGE_")
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH")
# Packages shown in the short block (all installed packages are kept in the JSON).
_RELEVANT = ("torch", "numpy", "triton", "torchvision", "torchaudio", "torchtriage", "transformers",
             "lightning", "pytorch-lightning", "accelerate", "deepspeed", "safetensors", "nvidia-")


def _redact(name: str, value: str) -> str:
    return "<redacted>" if any(w in name.upper() for w in _SECRET_WORDS) else value


def _packages() -> dict[str, str]:
    out: dict[str, str] = {}
    for dist in metadata.distributions():
        # PackageMetadata's protocol leaves out get(); the email.message.Message it is has it
        name = dist.metadata.get("Name")  # type: ignore[attr-defined]
        if name:
            out[name] = dist.version
    return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))


def _devices(init_cuda: bool) -> list[str]:
    devices = []
    if torch.cuda.is_available():
        # Naming a GPU initialises CUDA; inside a run we only do it when CUDA is already up.
        if init_cuda or torch.cuda.is_initialized():
            for i in range(torch.cuda.device_count()):
                cap = torch.cuda.get_device_capability(i)
                devices.append(f"cuda:{i} {torch.cuda.get_device_name(i)} (sm_{cap[0]}{cap[1]})")
        else:
            devices.append(f"cuda x{torch.cuda.device_count()}")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    devices.append(f"cpu ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)")
    return devices


def collect_env(*, init_cuda: bool = False) -> dict[str, Any]:
    """The environment as a JSON-able dict.

    Arguments:
        init_cuda: allow naming GPUs even when CUDA is not initialised yet (costs a CUDA init).

    Returns:
        {"python", "platform", "torch", "cuda", "cudnn", "devices", "env", "packages", ...}

    Example:
        >>> env = torchtriage.collect_env()
        >>> env["torch"]
        '2.5.1'
    """
    from . import __version__

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "torchtriage": __version__,
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn": cudnn,
        "devices": _devices(init_cuda),
        "default_dtype": str(torch.get_default_dtype()),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "env": {k: _redact(k, v) for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "packages": _packages(),
    }


def format_env(env: dict[str, Any], *, all_packages: bool = False) -> str:
    """The environment as a block of text, ready to paste into an issue."""
    lines = [
        f"torchtriage {env.get('torchtriage')}",
        f"Python      {env.get('python')} ({env.get('platform')})",
        f"torch       {env.get('torch')}",
        f"CUDA        {env.get('cuda') or '-'}  cuDNN {env.get('cudnn') or '-'}"
        + (f"  HIP {env['hip']}" if env.get("hip") else ""),
        f"devices     {'; '.join(env.get('devices', []))}",
        f"dtype       {env.get('default_dtype')}  deterministic={env.get('deterministic')}",
    ]
    envvars = env.get("env", {})
    lines.append("env vars    " + (", ".join(f"{k}={v}" for k, v in envvars.items()) if envvars else "-"))
    packages = env.get("packages", {})
    shown = packages if all_packages else {
        k: v for k, v in packages.items() if k.lower().startswith(_RELEVANT)}
    lines.append(f"packages    ({len(packages)} installed; " + ("all" if all_packages else "relevant") + " shown)")
    lines.extend(f"  {k}=={v}" for k, v in shown.items())
    return "\n".join(lines)
