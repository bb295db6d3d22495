"""`torchtriage diff [--steps N] [--seed S] A B [ARGS...]`: run two versions of a training
program for the same steps, seeds, data and initial weights, and report the first step, stage,
module and op where they part.

A and B: scripts, modules (as `python -m` takes them), or step record folders written by
`torchtriage run --record DIR`; `--git REV SCRIPT [ARGS...]` compares SCRIPT at REV (A) with
SCRIPT now (B). ARGS go to both.

Exit status: 0 the runs agree, 1 they part (or cannot be aligned), 2 bad input."""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import Any

from . import fail


def register(sub: Any) -> None:
    doc = (__doc__ or "").split("\n\n")
    p = sub.add_parser("diff", help="the first op where two versions of a training run part",
                       description="\n\n".join(doc[:2]), epilog=doc[-1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=3, metavar="N", help="training steps to run and compare (default 3)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="seed torch, numpy and random with S before each side's script (default 0)")
    p.add_argument("--git", metavar="REV", help="compare SCRIPT at git revision REV (A) with SCRIPT now (B)")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON ('-' for standard output)")
    p.add_argument("--html", metavar="PATH", help="write the report as a standalone HTML page, with both "
                                                  "runs' loss and gradient-norm curves")
    p.add_argument("a", nargs="?", help="run A: a script, a module or a step record folder")
    p.add_argument("b", nargs="?", help="run B (not with --git)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to both scripts")
    p.set_defaults(func=diff_command)


def diff_command(args: argparse.Namespace) -> int:
    from .._diff._driver import DiffInputError, at_revision, diff_sides, resolve
    from .._outputs import check_output

    if args.steps < 1:
        return fail(f"--steps {args.steps}: expected a number of steps >= 1")
    for flag, path in (("--json", args.json), ("--html", args.html)):
        if path and path != "-":
            problem = check_output(path, flag)
            if problem:
                return fail(problem)
    rest = list(args.args)
    with tempfile.TemporaryDirectory(prefix="torchtriage-rev-") as tmp:
        try:
            if args.git:
                if not args.a:
                    return fail("diff --git REV: no script given; usage: torchtriage diff --git REV SCRIPT [ARGS...]")
                rest = ([args.b] if args.b else []) + rest
                side_b = resolve(args.a, "B")
                side_a = resolve(at_revision(args.a, args.git, tmp), "A")
                side_a.label = f"{args.a}@{args.git}"
            else:
                if not args.a or not args.b:
                    return fail("diff: give two runs; usage: torchtriage diff A B [ARGS...] "
                                "or torchtriage diff --git REV SCRIPT [ARGS...]")
                side_a, side_b = resolve(args.a, "A"), resolve(args.b, "B")
            report = diff_sides(side_a, side_b, rest, steps=args.steps, seed=args.seed)
        except (DiffInputError, ValueError) as e:
            return fail(str(e))
    _write(args, report)
    from ..report import render_text

    if args.json != "-" and args.html != "-":
        print(render_text(report))
    else:
        print(render_text(report), file=sys.stderr)
    return 0 if report.ok else 1


def _write(args: argparse.Namespace, report: Any) -> None:
    from .._outputs import write_output

    if args.json:
        from ..report import render_json

        write_output(args.json, render_json(report) + "\n", "--json")
    if args.html:
        from ..report import render_html

        write_output(args.html, render_html(report), "--html")
