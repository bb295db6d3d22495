"""`torchtriage replay BUNDLE [--factory MODULE:FUNCTION | --script SCRIPT]`: run the failing
step again with your model and say whether the same finding comes back.

Exit status (usable with `git bisect run`): 0 the finding did not come back, 1 it did,
2 bad input (missing or tampered bundle, a model that does not match it)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from . import fail


def add_source_flags(p: Any) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--factory", metavar="MODULE:FUNCTION",
                   help="a function of yours returning a model, (model, optimizer) or a dict "
                        "with model / optimizer / step_fn / checks (several models: models / optimizers)")
    g.add_argument("--script", metavar="SCRIPT",
                   help="your training script: its first step is replayed with the bundle's "
                        "state and batch, then it is stopped (default: the recorded script)")
    p.add_argument("--checks", metavar="NAMES", help="comma-separated checks (default: the bundle's)")
    p.add_argument("--allow-other-version", action="store_true",
                   help="accept a bundle written by another torchtriage version")


def register(sub: Any) -> None:
    p = sub.add_parser("replay", help="replay a repro bundle's failing step",
                       description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("bundle", help="the bundle folder")
    add_source_flags(p)
    p.set_defaults(func=replay_command)


def open_bundle(args: argparse.Namespace) -> Any:
    from .._repro import load_bundle

    return load_bundle(args.bundle, allow_other_version=args.allow_other_version)


def replay_command(args: argparse.Namespace) -> int:
    from .._errors import BundleError
    from .._repro._source import source_from_args
    from ..report import render_text

    try:
        bundle = open_bundle(args)
        result = source_from_args(args, bundle).run(bundle)
    except (BundleError, ValueError, TypeError) as e:
        return fail(str(e).splitlines()[0])
    print(render_text(result.report), file=sys.stderr)
    print(result.describe())
    return 1 if result.reproduced else 0
