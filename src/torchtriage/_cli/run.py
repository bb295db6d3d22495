"""`torchtriage run [--json PATH] [--html PATH] SCRIPT [ARGS...]`: the user's script, unchanged,
run as `python SCRIPT ARGS...` would run it, with a discovering `Session` around it."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import types
from typing import Any

from . import fail


def register(sub: Any) -> None:
    from .._catalogue import msg

    p = sub.add_parser("run", help="run a training script under torchtriage",
                       description="Run SCRIPT as `python SCRIPT ARGS...` would (or MODULE as `python -m "
                                   "MODULE ARGS...`), instrumented; print the report to stderr when it ends.",
                       epilog=msg("cli.run_exit_codes"), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", metavar="PATH", help="write the report as JSON (also when the script fails; "
                                                   "'-' for standard output, after the script's own output)")
    p.add_argument("--html", metavar="PATH",
                   help="write the report as a standalone HTML page ('-' for standard output)")
    # REMAINDER: everything after `-m MODULE` is the module's arguments, as with `python -m`.
    p.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE [ARGS]",
                   help="run a module as `python -m MODULE ARGS...` does (instead of SCRIPT)")
    p.add_argument("--tensorboard", metavar="DIR", help="log loss, gradient norm, lr and the findings to "
                                                      "TensorBoard event files in DIR (extra: tensorboard)")
    p.add_argument("--wandb", action="store_true", help="log the same to a W&B run (the active one, or a new "
                                                      "one in project $WANDB_PROJECT; extra: wandb)")
    p.add_argument("--on-anomaly", choices=("warn", "raise", "skip_step", "record"), default="record",
                   help="what to do when a check finds an error (default: record, report at the end)")
    p.add_argument("--checks", metavar="NAMES", help="comma-separated checks to run (default: all)")
    p.add_argument("--bundle", metavar="DIR", help="write a repro bundle of the failing step into DIR")
    p.add_argument("--max-bundle-mb", type=float, default=512.0, metavar="MB", help="size limit of a bundle")
    p.add_argument("--quiet", action="store_true", help="print the report only when something was found")
    p.add_argument("--stall-timeout", metavar="S", help="distributed runs: seconds a collective may wait "
                   "without progress on any rank before the job is reported and ended (default: "
                   "20x the slowest step, at least 300)")
    p.add_argument("--no-rerun", action="store_true",
                   help="do not rerun the script when a non-finite value could not be localized in the run "
                        "(by default it is rerun from the start up to that step, once, with the step recorded)")
    # the rerun's own child process (issue 27): not for users
    p.add_argument("--rerun-at", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--rerun-out", default=None, help=argparse.SUPPRESS)
    from .._diff._side import add_record_options

    add_record_options(p)  # issue 28: `--record DIR`, a reference run for `torchtriage diff`
    # Optional here and checked in run_command: argparse would otherwise also list ARGS as missing.
    p.add_argument("script", nargs="?", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.set_defaults(func=run_command)


def _check_writable(path: str, flag: str) -> str | None:
    from .._outputs import check_output

    return check_output(path, flag)


def _trim(tb: Any) -> Any:
    """The traceback without torchtriage's and runpy's frames, as `python SCRIPT` would show it."""
    from .._frames import without_our_frames

    return without_our_frames(tb, also=lambda fn: os.path.basename(fn) == "runpy.py" or "<frozen runpy>" in fn)


def run_command(args: argparse.Namespace) -> int:
    if args.module is not None:
        return run_module_command(args)
    script = args.script
    if not script:
        return fail("run: no script given; usage: torchtriage run [--json PATH] SCRIPT [ARGS...] "
                    "or torchtriage run [--json PATH] -m MODULE [ARGS...]")
    if not os.path.exists(script):
        return fail(f"script {script!r} not found (working directory: {os.getcwd()})")
    if os.path.isdir(script):
        return fail(f"script {script!r} is a folder; give a .py file")
    try:
        with open(script, "rb") as fh:
            source = fh.read()
        compile(source, script, "exec")
    except SyntaxError as e:
        return fail(f"{script}:{e.lineno}: syntax error: {e.msg}")
    except (OSError, ValueError) as e:
        return fail(f"cannot read script {script!r}: {e}")
    problem, checks = _check_options(args)
    if problem:
        return fail(problem)
    options: dict[str, Any] = {"script": os.path.abspath(script), "argv": [script, *args.args]}
    session, problem = _session(args, checks, options)
    if problem or session is None:
        return fail(problem or "")
    session.meta.update(script=script, argv=[script, *args.args])

    old_argv, old_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = [script, *args.args]
    script_dir = os.path.dirname(os.path.abspath(script))
    if sys.path:
        sys.path[0] = script_dir
    else:
        sys.path.insert(0, script_dir)
    return _run_and_report(args, session, lambda: _run_main(script, source), old_argv, old_path0)


def _check_options(args: argparse.Namespace) -> tuple[str | None, Any]:
    """The first problem with the options shared by SCRIPT and -m MODULE, and the checks."""
    for flag, path in (("--json", args.json), ("--html", args.html)):
        if path and path != "-":
            problem = _check_writable(path, flag)
            if problem:
                return problem, None
    checks: Any = "default"
    if args.checks:
        from .. import _registry

        checks = [c.strip() for c in args.checks.split(",") if c.strip()]
        unknown = [c for c in checks if c not in _registry.CHECKS]
        if unknown:
            return f"--checks: unknown check(s) {', '.join(unknown)}; accepted: {', '.join(_registry.CHECKS)}", None
    from .._outputs import check_folder_output

    for flag, folder in (("--bundle", args.bundle), ("--tensorboard", args.tensorboard),
                         ("--record", getattr(args, "record", None))):
        problem = check_folder_output(folder, flag) if folder else None
        if problem:
            return problem, None
    if args.stall_timeout is not None:
        try:
            seconds = float(args.stall_timeout)
        except ValueError:
            seconds = -1.0
        if not 0 < seconds < float("inf"):
            return f"--stall-timeout {args.stall_timeout}: expected a number of seconds > 0", None
    return None, checks


def _session(args: argparse.Namespace, checks: Any, options: dict[str, Any]) -> tuple[Any, str | None]:
    from .._session import Session

    if args.bundle:
        options.update(bundle_dir=args.bundle, max_bundle_mb=args.max_bundle_mb)
    if getattr(args, "rerun_at", None) is not None and args.rerun_out:
        from .._nonfinite._rerun import stop_child

        options.update(rerun_at=args.rerun_at, rerun_out=args.rerun_out, rerun_stop=stop_child)
        from .._nonfinite._rerun import pretend_rank

        pretend_rank()
    if args.tensorboard:
        options["tensorboard"] = args.tensorboard
    if args.wandb:
        options["wandb"] = True
    from .._distributed import active

    if active():
        # One rank of several (issue 15): the stall watchdog writes the merged report itself.
        from .._distributed._watchdog import STALL_EXIT_CODE

        def stall_writer(report: Any) -> None:
            report = type(report)(report.findings, meta=dict(report.meta, exit_code=STALL_EXIT_CODE),
                                  series=report.series)
            _emit_report(args, report, None)

        stall = float(args.stall_timeout) if args.stall_timeout is not None else None
        options.update(stall_timeout=stall, report_writer=stall_writer)
    if getattr(args, "record", None):
        checks, problem = _with_recorder(args, checks)
        if problem:
            return None, problem
    try:
        return Session(discover=True, on_anomaly=args.on_anomaly, checks=checks, report=False, **options), None
    except ImportError as e:  # a dashboard's package is missing: the message names the extra
        return None, str(e)


def _with_recorder(args: argparse.Namespace, checks: Any) -> tuple[Any, str | None]:
    """The checks with an `OpRecorder` writing `--record DIR` (issue 28)."""
    from .. import _registry
    from .._diff._side import recorder_for

    if args.record_steps < 1:
        return None, f"--record-steps {args.record_steps}: expected a number of steps >= 1"
    try:
        seed = int(args.record_seed) if args.record_seed is not None else None
        recorder = recorder_for(args.record, steps=args.record_steps, stop=args.record_stop,
                                init_dir=args.record_init, seeds_dir=args.record_seeds, seed=seed)
    except ValueError as e:
        return None, str(e)
    names = [] if args.record_only else list(_registry.DEFAULT_CHECKS) if checks == "default" else list(checks)
    return [*names, recorder], None


def run_module_command(args: argparse.Namespace) -> int:
    """`torchtriage run -m MODULE [ARGS...]`: as `python -m MODULE ARGS...` (sys.path[0] is the
    working directory, sys.argv[0] the module's file, `__name__ == "__main__"`)."""
    import importlib.util
    import runpy

    if not args.module:
        return fail("run -m: no module given; usage: torchtriage run [--json PATH] -m MODULE [ARGS...]")
    module, argv = args.module[0], list(args.module[1:])
    problem, checks = _check_options(args)
    if problem:
        return fail(problem)
    old_argv, old_path0 = sys.argv[:], sys.path[0] if sys.path else None
    if sys.path:
        sys.path[0] = os.getcwd()
    else:
        sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:  # a package: its __main__
            spec = importlib.util.find_spec(module + ".__main__")
    except (ImportError, ValueError) as e:
        spec, why = None, str(e)
    else:
        why = "" if spec is not None else "not found"
    if spec is None:
        sys.path[0:1] = [old_path0] if old_path0 is not None else []
        return fail(f"-m {module}: no module named {module!r} ({why}; working directory: {os.getcwd()})")
    origin = spec.origin or module
    options: dict[str, Any] = {"script": origin, "argv": [origin, *argv]}
    session, problem = _session(args, checks, options)
    if problem or session is None:
        sys.path[0:1] = [old_path0] if old_path0 is not None else []
        return fail(problem or "")
    session.meta.update(script=origin, module=module, argv=["-m", module, *argv])
    sys.argv = [origin, *argv]
    return _run_and_report(args, session, lambda: runpy.run_module(module, run_name="__main__", alter_sys=True),
                           old_argv, old_path0)


def _run_and_report(args: argparse.Namespace, session: Any, target: Any, old_argv: list[str],
                    old_path0: str | None) -> int:
    import time

    exit_code = 0
    error: BaseException | None = None
    t0 = time.monotonic()
    try:
        with session:
            try:
                target()
            except SystemExit as e:
                exit_code = _exit_code(e)
    except BaseException as e:  # the script's own error; reported, then shown as Python would
        error = e
        # Ctrl-C: Python shows the traceback and ends as killed by SIGINT, which a shell reads as 130.
        exit_code = 130 if isinstance(e, KeyboardInterrupt) else 1
    finally:
        sys.argv = old_argv
        if old_path0 is not None:
            sys.path[0] = old_path0
        sys.stdout.flush()
    report = session.report
    session.meta["exit_code"] = exit_code
    report = type(report)(report.findings, meta=dict(report.meta, exit_code=exit_code), series=report.series)
    if getattr(args, "rerun_out", None):
        from .._nonfinite._rerun import write_child

        write_child(session, args.rerun_out)  # the rerun's child: hands back, prints nothing
        return exit_code
    dist = session.checker("distributed")
    if dist is not None and not getattr(args, "no_rerun", True):
        report = _rerun(args, report, time.monotonic() - t0, session.rank_fields)
    if dist is not None:
        # every rank hands in its report; rank 0 writes and prints the merged one, once (issue 15)
        merged = dist.gather(report)
        if merged is not None:
            exit_code = _emit_report(args, merged, error, exit_code)
    else:
        if not getattr(args, "no_rerun", True):
            report = _rerun(args, report, time.monotonic() - t0)
        exit_code = _emit_report(args, report, error, exit_code)
    if error is not None:
        # Re-raise semantics of `python SCRIPT`: the original traceback (from the script's
        # first frame on), exit code 1.
        traceback.print_exception(type(error), error, _trim(error.__traceback__), file=sys.stderr)
    return exit_code


def _rerun(args: argparse.Namespace, report: Any, elapsed: float, rank_fields: Any = None) -> Any:
    """A non-finite value the run could not localize: the script once more, up to that step,
    with the step recorded (issue 27, `_nonfinite/_rerun.py`)."""
    import torch

    from .._nonfinite._rerun import rerun, unlocalized

    f = unlocalized(report)
    if f is None:
        return report
    from .._catalogue import msg

    print(msg("nonfinite.rerun.start", step=f.step), file=sys.stderr)
    command = ["--checks", args.checks] if args.checks else []
    command += ["-m", *args.module] if args.module is not None else [args.script, *args.args]
    try:
        rank = None
        if rank_fields:
            world = int(os.environ.get("WORLD_SIZE", "0") or 0)
            rank = (int(rank_fields.get("rank", 0)), world) if world > 1 else None
        return rerun(report, command, seed=torch.initial_seed(), elapsed=elapsed, bundle=args.bundle, rank=rank)
    except Exception as e:  # our own failure must not lose the report
        import warnings

        from .._errors import TriageInternalWarning

        warnings.warn(msg("internal.warning", where="rerun", error=f"{type(e).__name__}: {e}"),
                      TriageInternalWarning, stacklevel=1)
        return report


def _emit_report(args: argparse.Namespace, report: Any, error: BaseException | None, exit_code: int = 0) -> int:
    try:
        _write_outputs(args, report)
    except OSError as e:  # checked before the run, but the disk can still refuse (/dev/full)
        fail(str(e))
        exit_code = exit_code or 2
    if not (args.quiet and not report.findings and error is None):
        from ..report import render_text

        print(render_text(report), file=sys.stderr)
    return exit_code


def _run_main(script: str, source: bytes) -> None:
    """Execute the script as `python SCRIPT` does: a fresh `__main__` module whose `__file__`
    (and the code's file name, shown in tracebacks) is the absolute path, as Python >= 3.9
    sets it, while `sys.argv[0]` stays as typed (`runpy.run_path` would overwrite it)."""
    import builtins
    from importlib.machinery import SourceFileLoader

    path = os.path.abspath(script)
    code = compile(source, path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __package__=None, __spec__=None,
                         __loader__=SourceFileLoader("__main__", path), __builtins__=builtins)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _exit_code(e: SystemExit) -> int:
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _write_outputs(args: argparse.Namespace, report: Any) -> None:
    # As a shell redirection (`_outputs.py`): '-' is standard output (after the script's own
    # output, which the script may also print there), symlinks followed, devices in place.
    from .._outputs import write_output

    if args.json:
        from ..report import render_json

        write_output(args.json, render_json(report) + "\n", "--json")
    if args.html:
        from ..report import render_html

        write_output(args.html, render_html(report), "--html")
