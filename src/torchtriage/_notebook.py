"""Jupyter / IPython: `%load_ext torchtriage` registers the `%%torchtriage` cell magic.

    %%torchtriage [--on-anomaly MODE] [--checks A,B] [--json PATH] [--html PATH]
    model = Net(); opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader: ...

The cell runs under a discovering session (like `torchtriage run`): the models and optimizers
it builds or calls are watched, an exception the cell raises is triaged (IPython shows its
traceback as usual), and the report is displayed below the cell (HTML in a notebook, text in a
terminal). The magic returns nothing; the last report is `torchtriage._notebook.last_report`.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

last_report: Any = None


class _MagicParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        from ._errors import ConfigError

        raise ConfigError(f"%%torchtriage: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _MagicParser(prog="%%torchtriage", add_help=False)
    p.add_argument("--on-anomaly", choices=("warn", "raise", "skip_step", "record"), default="record")
    p.add_argument("--checks", default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--html", default=None)
    p.add_argument("--tensorboard", default=None)
    p.add_argument("--wandb", action="store_true")
    p.add_argument("--lang", choices=("en", "zh"), default=None)
    return p


def run_cell(shell: Any, line: str, cell: str) -> Any:
    """Run `cell` in `shell` under a discovering session and display its report."""
    global last_report
    from IPython.display import display

    from ._session import Session

    args = _parser().parse_args(shlex.split(line))
    _check_outputs(args)
    checks: Any = "default"
    if args.checks:
        checks = [c.strip() for c in args.checks.split(",") if c.strip()]
    options: dict[str, Any] = {}
    if args.tensorboard:
        options["tensorboard"] = args.tensorboard
    if args.wandb:
        options["wandb"] = True
    session = Session(discover=True, on_anomaly=args.on_anomaly, checks=checks, report=False, lang=args.lang,
                      **options)
    active = session.__enter__()
    error: BaseException | None = None
    try:
        result = shell.run_cell(cell)
        error = result.error_in_exec
    finally:
        session.__exit__(type(error) if error is not None else None, error,
                         error.__traceback__ if error is not None else None)
    report = active.report
    last_report = report
    _write_outputs(args, report)
    display(report)
    return None


def _check_outputs(args: argparse.Namespace) -> None:
    """Output paths are checked before the cell runs, as `torchtriage run` does (issue 10)."""
    from ._errors import ConfigError
    from ._outputs import check_output

    for flag, path in (("--json", args.json), ("--html", args.html)):
        problem = check_output(path, flag) if path else None
        if problem:
            raise ConfigError(f"%%torchtriage: {problem}")


def _write_outputs(args: argparse.Namespace, report: Any) -> None:
    """Write --json / --html like a shell redirection; a write error (a full disk) is one line
    on stderr, and the report is still displayed."""
    import sys

    from ._outputs import OutputError, write_output
    from .report import render_html, render_json

    for flag, path, render in (("--json", args.json, render_json), ("--html", args.html, render_html)):
        if path:
            try:
                write_output(path, render(report) + ("\n" if flag == "--json" else ""), flag)
            except OutputError as e:
                print(f"torchtriage: error: {e}", file=sys.stderr)


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext torchtriage`: register the `%%torchtriage` cell magic."""

    def torchtriage(line: str, cell: str) -> None:
        run_cell(ipython, line, cell)

    torchtriage.__doc__ = __doc__
    ipython.register_magic_function(torchtriage, magic_kind="cell", magic_name="torchtriage")
