"""The `torchtriage` command: a thin argparse front, one file per command.

Each command module defines `register(subparsers)` (adds its parser and sets `func`)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

# One module per command; each registers itself.
COMMANDS = ("run", "env", "lab", "splits", "replay", "shrink", "make_test", "report", "diff")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # One clear line and exit code 2, no usage dump and no traceback.
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def _print_message(self, message: str, file: Any = None) -> None:
        # argparse drops a write error here (`--help > /dev/full` then exited 0 having printed
        # nothing); `main` turns it into the one line and exit 2 every command gives (issue 10).
        if message:
            (file or sys.stderr).write(message)


def _add_global_options(parser: argparse.ArgumentParser, *, default: Any) -> None:
    # Global options: accepted before the command (`torchtriage --lang zh run x.py`) and after
    # it (`torchtriage run --lang zh x.py`). On a command's parser the default is SUPPRESS, so
    # a value given before the command is not reset by the command's parser (issue 18).
    if "--lang" not in parser._option_string_actions:
        parser.add_argument("--lang", choices=("en", "zh"), default=default, help="language of messages")


def build_parser() -> argparse.ArgumentParser:
    from .._catalogue import msg

    parser = _Parser(prog="torchtriage", description="Find where and why a PyTorch training run went wrong.",
                     epilog=msg("cli.exit_codes"), formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_global_options(parser, default=None)
    parser.add_argument("--version", action="version", version=_version_line(), help=msg("cli.version_help"))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"{__name__}.{name}":
                continue  # command not part of this build
            raise
        mod.register(sub)
    for name, command in sub.choices.items():
        _add_global_options(command, default=argparse.SUPPRESS)
        if command.epilog is None:  # every command's --help ends with its exit codes (issue 24)
            command.epilog = msg(f"cli.exit.{name}")
            command.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def _version_line() -> str:
    import platform

    import torch

    from .. import __version__

    return f"torchtriage {__version__} (torch {torch.__version__}, Python {platform.python_version()})"


def _help_language(argv: Sequence[str]) -> str | None:
    """The `--lang` given before the command's first operand (`torchtriage --lang zh lab -h`,
    `torchtriage run --lang zh -h`): the help texts come from the catalogue, so the language is
    set before the parser is built. Later options belong to the script or are the command's."""
    found, commands = None, {c.replace("_", "-") for c in COMMANDS}
    it = iter(argv)
    for tok in it:
        if tok == "--lang":
            found = next(it, None)
        elif tok.startswith("--lang="):
            found = tok.split("=", 1)[1]
        elif tok in ("-m", "--") or (not tok.startswith("-") and tok not in commands):
            break
    return found if found in ("en", "zh") else None


def main(argv: Sequence[str] | None = None) -> int:
    lang = _help_language(sys.argv[1:] if argv is None else argv)
    if lang:
        from .._catalogue import set_language

        set_language(lang)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        if e.code in (0, None):  # --help printed to stdout: buffered, so flushed here
            failed = _help_write_failed()
            if failed is not None:
                return failed
        raise
    except OSError as e:
        return _stdout_failed(e)
    if args.lang:
        from .._catalogue import set_language

        set_language(args.lang)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if args.command == "run":  # the user's script owns stdout and its errors
        return int(args.func(args) or 0)
    from ._stdout import StdoutError, guarded_stdout

    try:
        with guarded_stdout():
            code = args.func(args)
    except StdoutError as e:
        return _stdout_failed(e)
    return int(code or 0)


def _stdout_failed(e: OSError) -> int:
    """Writing to standard output failed: one line, exit 2; a closed pipe ends quietly (141)."""
    from ._stdout import SIGPIPE_EXIT, abandon_stdout, is_broken_pipe

    abandon_stdout()
    if is_broken_pipe(e):
        return SIGPIPE_EXIT
    from .._catalogue import msg

    return fail(msg("outputs.stdout_failed", reason=e.strerror or str(e)))


def _help_write_failed() -> int | None:
    try:
        sys.stdout.flush()
    except OSError as e:
        return _stdout_failed(e)
    return None


def fail(message: str, code: int = 2) -> int:
    """Print one line to stderr and return the exit code for bad input."""
    print(f"torchtriage: error: {message}", file=sys.stderr)
    return code
