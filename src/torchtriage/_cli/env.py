"""`torchtriage env [--json] [--all]`: the environment block, ready to paste into an issue."""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("env", help="print the environment (versions, devices, env vars, packages)",
                       description="Print Python, torch, CUDA versions, devices, the CUDA_/TORCH_/OMP_/PYTORCH_ "
                                   "environment variables and installed packages, ready to paste into an issue.")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--all", action="store_true", help="list every installed package, not only the relevant ones")
    p.set_defaults(func=env_command)


def env_command(args: argparse.Namespace) -> int:
    from .._env import collect_env, format_env

    env = collect_env(init_cuda=True)
    if args.json:
        print(json.dumps(env, indent=1))
    else:
        print(format_env(env, all_packages=args.all))
    return 0
