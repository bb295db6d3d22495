"""`torchtriage shrink BUNDLE [--factory M:F | --script S] [--out DIR]`: the fewest samples
(and shortest sequence prefix) that still reproduce the bundle's finding, by delta debugging."""

from __future__ import annotations

import argparse
import os
from typing import Any

from . import fail
from .replay import add_source_flags, open_bundle


def register(sub: Any) -> None:
    p = sub.add_parser("shrink", help="shrink a bundle's failing batch to a minimal input",
                       description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("bundle", help="the bundle folder")
    add_source_flags(p)
    p.add_argument("--out", metavar="DIR", help="where to write the minimal bundle (default: BUNDLE-min)")
    p.add_argument("--no-prefix", action="store_true", help="do not shorten sequences")
    p.set_defaults(func=shrink_command)


def shrink_command(args: argparse.Namespace) -> int:
    from .._catalogue import msg
    from .._errors import BundleError
    from .._outputs import check_folder_output
    from .._repro import shrink
    from .._repro._source import source_from_args

    problem = check_folder_output(args.out, "--out") if args.out else None
    if problem:  # before the replays, which take a while
        return fail(problem)
    try:
        bundle = open_bundle(args)
        source = source_from_args(args, bundle)
        result = shrink(bundle, source.run, prefix=not args.no_prefix, log=lambda line: print(line, flush=True))
        if result is None:
            return fail(msg("repro.shrink.not_reproduced", describe=source.run(bundle).describe().splitlines()[0]), 1)
        if result.invalid is not None:
            return fail(result.invalid, 1)  # a tensor of the step was not sliced: nothing to save
        out = args.out or os.path.normpath(args.bundle) + "-min"
        result.bundle.save(out)
    except (BundleError, ValueError, TypeError, OSError) as e:  # OSError: the output folder refused a file
        return fail(str(e).splitlines()[0])
    print(msg("repro.shrink.done", replays=result.replays, kept=len(result.samples), n=result.batch_size,
              samples=list(result.samples), prefix=result.prefix if result.prefix is not None else "-", out=out))
    return 0
