"""`torchtriage report REPORT.json [--html OUT] [--text] [--lang zh]`: re-render a saved JSON
report (from `run --json` or `dump_json`) as terminal text and/or a standalone HTML page.

Without `--html`, the text is printed to stdout; with `--html`, the page is written (to stdout
for `--html -`) and the text is printed too only when `--text` is given. Exit status: 0 when
rendered, 2 for bad input (missing file, not JSON, not a torchtriage report)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from .._outputs import OutputError, check_output, write_output
from . import fail


def register(sub: Any) -> None:
    from .._catalogue import msg

    p = sub.add_parser("report", help=msg("cli.report.help"), description=msg("cli.report.help") + ".")
    p.add_argument("path", metavar="REPORT.json", help="a report written by `torchtriage run --json`")
    p.add_argument("--html", metavar="OUT", help="write a standalone HTML page to OUT ('-' for stdout)")
    p.add_argument("--text", action="store_true", help="print the text report (the default without --html)")
    # dest differs from the top-level --lang so that `torchtriage --lang zh report ...` keeps working.
    p.add_argument("--lang", dest="report_lang", choices=("en", "zh"), default=None,
                   help="language of the report's headings")
    p.set_defaults(func=report_command)


def _load(path: str) -> tuple[Any, str | None]:
    """The Report, or None and the one-line reason it could not be read."""
    from .._catalogue import msg
    from .._findings import Report

    if not os.path.exists(path):
        return None, msg("cli.report.missing", path=path, cwd=os.getcwd())
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        return None, msg("cli.report.unreadable", path=path, error=getattr(e, "strerror", None) or e)
    try:
        data = json.loads(text)
    except ValueError as e:
        return None, msg("cli.report.not_json", path=path, error=e)
    try:
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        findings = data.get("findings", [])
        if not isinstance(findings, list) or not all(isinstance(d, dict) for d in findings):
            raise ValueError("'findings' must be a list of objects")
        for key in ("meta", "series"):
            if not isinstance(data.get(key, {}), dict):
                raise ValueError(f"'{key}' must be an object")
        return Report.from_dict(data), None
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        return None, msg("cli.report.bad_schema", path=path,
                         error=str(e).splitlines()[0] if str(e) else type(e).__name__)


def report_command(args: argparse.Namespace) -> int:
    from .._catalogue import msg, set_language

    if args.report_lang:
        set_language(args.report_lang)
    if args.html:
        problem = check_output(args.html, "--html")
        if problem:
            return fail(problem)
    report, problem = _load(args.path)
    if problem:
        return fail(problem)
    if args.html:
        from ..report import render_html

        try:
            write_output(args.html, render_html(report), "--html")
        except OutputError as e:
            return fail(str(e))
        if args.html != "-":
            print(msg("cli.report.written", path=args.html), file=sys.stderr)
    if args.text or not args.html:
        from ..report import render_text

        print(render_text(report))
    return 0
