"""`torchtriage splits TRAIN TEST [--val VAL] [--group COL] [--time COL] [--label COL] ...`:
check split files (CSV, JSONL, Parquet) for leakage. It reports and never changes a split;
`--suggest-split OUT` writes a group-aware split to a new file and says so.

Exit codes: 0 clean, 1 findings (errors or warnings), 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .._catalogue import msg
from . import fail


def register(sub: Any) -> None:
    p = sub.add_parser("splits", help=msg("leakage.cli.help"), description=msg("leakage.cli.help") + ". "
                       + msg("leakage.cli.scope") + ". Exit code: 0 clean, 1 findings, 2 bad input.")
    p.add_argument("train", help="train split: a .csv, .tsv, .jsonl or .parquet file, or a folder or glob of shards")
    p.add_argument("test", help="test split, same format family as train")
    p.add_argument("--val", metavar="VAL", help="validation split")
    p.add_argument("--group", metavar="COL", help="group column (writer, patient, document, user, ...)")
    p.add_argument("--time", metavar="COL", help="time column (numbers or ISO 8601 dates)")
    p.add_argument("--label", metavar="COL", help="label column (for conflicting labels; not compared as content)")
    p.add_argument("--ignore", metavar="COLS", default="", help="comma-separated columns that are not content (ids)")
    p.add_argument("--content", metavar="COLS", default="",
                   help="comma-separated columns compared as content even if they look like row ids")
    p.add_argument("--file-column", metavar="COL", help="column of file paths, compared by the files' bytes")
    p.add_argument("--near-threshold", metavar="X", type=float, default=None,
                   help="near-duplicate similarity threshold in (0, 1] (default 0.9 for texts, 0.98 for numbers)")
    p.add_argument("--no-near", action="store_true", help="skip the near-duplicate search")
    p.add_argument("--engine", default="auto", choices=("auto", "memory", "duckdb", "dask"),
                   help=msg("leakage.cli.engine"))
    p.add_argument("--memory-limit", metavar="SIZE", help=msg("leakage.cli.memory_limit"))
    p.add_argument("--scheduler", metavar="ADDRESS", help=msg("leakage.cli.scheduler"))
    p.add_argument("--json", metavar="PATH", help="write the report as JSON")
    p.add_argument("--suggest-split", metavar="OUT",
                   help="write a group-aware split of all rows to the NEW file OUT (.csv/.jsonl/.parquet)")
    p.add_argument("--quiet", action="store_true", help="print the report only when something was found")
    p.set_defaults(func=splits_command)


def _writable(path: str, flag: str) -> str | None:
    from .._outputs import check_output

    return check_output(path, flag)


def splits_command(args: argparse.Namespace) -> int:
    from .._leakage import check_splits

    for flag, path in (("--json", args.json), ("--suggest-split", args.suggest_split)):
        if path:
            problem = _writable(path, flag)
            if problem:
                return fail(problem)
    if args.suggest_split:
        if not args.group:
            return fail(msg("leakage.cli.suggest_needs_group"))
        if os.path.exists(args.suggest_split):
            return fail(msg("leakage.cli.suggest_exists", path=args.suggest_split))
    inputs = {"train": args.train, "test": args.test}
    if args.val:
        inputs["val"] = args.val
    client = None
    try:
        if args.scheduler:
            if args.engine != "dask":
                return fail(f"--scheduler {args.scheduler}: needs --engine dask (given: --engine {args.engine})")
            from .._leakage._dask import connect

            client = connect(args.scheduler)
        report = check_splits(
            args.train, args.test, val=args.val, groups=args.group, time=args.time, labels=args.label,
            ignore=[c.strip() for c in args.ignore.split(",") if c.strip()],
            content=[c.strip() for c in args.content.split(",") if c.strip()], files=args.file_column,
            near=not args.no_near, near_threshold=args.near_threshold, engine=args.engine,
            memory_limit=args.memory_limit)
    except (ValueError, TypeError, ImportError, OSError) as e:
        return fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
    finally:
        if client is not None:
            client.close()
    if args.json:
        from .._outputs import OutputError, write_output
        from ..report import render_json

        try:
            write_output(args.json, render_json(report) + "\n", "--json")
        except OutputError as e:
            return fail(str(e))
    if not (args.quiet and not report.findings):
        from ..report import render_text

        print(render_text(report))
    if args.suggest_split:
        from .._leakage._suggest import suggest_split

        try:
            rows, groups = suggest_split(inputs, args.group, args.suggest_split)
        except (ValueError, ImportError) as e:
            return fail(str(e))
        except OSError as e:  # checked before the work, but the disk can still refuse (issue 10)
            return fail(msg("outputs.write_failed", flag="--suggest-split", path=args.suggest_split,
                            reason=e.strerror or str(e)))
        print(msg("leakage.cli.suggest_written", path=args.suggest_split, rows=rows, groups=groups), file=sys.stderr)
    return 0 if report.ok else 1
