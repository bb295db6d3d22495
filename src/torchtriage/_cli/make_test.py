"""`torchtriage make-test BUNDLE [--factory M:F | --script S] [--out DIR]`: shrink the bundle
(unless it is already shrunk or --no-shrink), then write a pytest file that fails while the
finding comes back, the minimal bundle it loads, and a FIX.md record to fill in."""

from __future__ import annotations

import argparse
from typing import Any

from . import fail
from .replay import add_source_flags, open_bundle


def register(sub: Any) -> None:
    p = sub.add_parser("make-test", help="write a regression test and a FIX.md record from a bundle",
                       description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("bundle", help="the bundle folder")
    add_source_flags(p)
    p.add_argument("--out", metavar="DIR", default="tests", help="folder for the test and FIX.md (default: tests)")
    p.add_argument("--name", help="name of the test (default: from the finding's code)")
    p.add_argument("--no-shrink", action="store_true", help="use the bundle's batch as it is")
    p.set_defaults(func=make_test_command)


def make_test_command(args: argparse.Namespace) -> int:
    from .._catalogue import msg
    from .._errors import BundleError
    from .._outputs import check_folder_output
    from .._repro import make_test, shrink
    from .._repro._source import source_from_args

    problem = check_folder_output(args.out, "--out") if args.out else None
    if problem:  # before the replays, which take a while
        return fail(problem)
    try:
        bundle = open_bundle(args)
        source = source_from_args(args, bundle)
        shrunk, replays = None, None
        if not args.no_shrink and not bundle.meta.get("shrunk"):
            shrunk = shrink(bundle, source.run, log=lambda line: print(line, flush=True))
            if shrunk is None:
                return fail(msg("repro.shrink.not_reproduced",
                                describe=source.run(bundle).describe().splitlines()[0]), 1)
            bundle, replays = shrunk.bundle, shrunk.replays
        made = make_test(bundle, args.out, factory=source.factory, script=source.script, name=args.name,
                         shrunk=shrunk, replays=replays)
    except (BundleError, ValueError, TypeError, OSError) as e:  # OSError: the output folder refused a file
        return fail(str(e).splitlines()[0])
    print(msg("repro.make_test.done", test=made.test, fix=made.fix, bundle=made.bundle))
    return 0
