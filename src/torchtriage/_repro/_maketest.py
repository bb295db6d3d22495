"""`make_test`: leave the fix behind as a regression test and a record (seed G.7).

Writes, into an output folder:
    <name>_bundle/   the minimal bundle (shrunk batch, pre-step state, RNG): JSON + safetensors
    test_<name>.py   a self-contained pytest file: it rebuilds the model with the user's own
                     factory (or script), replays the minimal input and asserts the finding
                     is gone, so it fails while the bug is there and passes once it is fixed
    FIX.md           the record to fill in: symptom, minimal input, cause, change, results

The test accepts a bundle from another torchtriage version of the same format, so that
upgrading torchtriage does not break a user's regression suite.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
from typing import Any

from .._catalogue import msg
from ._bundle import Bundle
from ._result import describe_signature, signature

_TEST_TEMPLATE = '''"""Regression test written by `torchtriage make-test`.

Symptom: {symptom}
It replays the minimal input in {bundle_dir}/ (a torchtriage bundle: JSON and safetensors
files, no pickle) through your model and fails while the same finding comes back.
See FIX.md beside this file for the record of the fix.
"""

from pathlib import Path

import torchtriage

HERE = Path(__file__).resolve().parent
BUNDLE = HERE / {bundle_dir!r}
{source_setup}

def test_{slug}_is_gone():
    bundle = torchtriage.load_bundle(BUNDLE, allow_other_version=True)
    result = torchtriage.replay(bundle, {replay_args})
    assert not result.reproduced, result.describe()
'''


@dataclasses.dataclass(frozen=True)
class MadeTest:
    """Paths written by `make_test`."""

    test: str
    fix: str
    bundle: str


def _slug(text: str) -> str:
    s = re.sub(r"[^0-9a-zA-Z]+", "_", text).strip("_").lower()
    return s[:48] or "repro"


def make_test(bundle: Bundle, out_dir: str, *, factory: str | None = None, script: str | None = None,
              name: str | None = None, shrunk: Any = None, replays: int | None = None) -> MadeTest:
    """Write the regression test, the minimal bundle and FIX.md into `out_dir`.

    Arguments:
        bundle: the (preferably shrunk) bundle whose batch becomes the test's input.
        out_dir: the folder to write into (created).
        factory: "module:function" that builds the model (the test imports it), or
        script: the training script the test replays through.
        name: a name for the files (default: from the finding's code).
        shrunk: the `ShrinkResult` when shrinking ran (recorded in FIX.md).

    Returns:
        A `MadeTest` with the three paths.
    """
    if (factory is None) == (script is None):
        raise ValueError(msg("repro.make_test.source"))
    sig = signature(bundle)
    name = _slug(name or sig.get("code") or sig.get("type") or "repro")
    os.makedirs(out_dir, exist_ok=True)
    bundle_dir = f"{name}_bundle"
    bundle.save(os.path.join(out_dir, bundle_dir))
    if factory is not None:
        module, _, func = factory.partition(":")
        mod_dir = _module_dir(module)
        setup = (f"import sys  # noqa: E402\n\nsys.path.insert(0, {mod_dir!r})\n\n\ndef _build():\n"
                 f"    from {module} import {func}\n\n    return {func}()\n")
        replay_args = "factory=_build"
    else:
        assert script is not None  # exactly one of factory and script, checked above
        # Relative to the test file when possible, so that the test survives a move or a clone.
        try:
            rel = os.path.relpath(os.path.abspath(script), os.path.abspath(out_dir))
            setup = f"SCRIPT = str((HERE / {rel!r}).resolve())\n"
        except ValueError:  # another drive (Windows)
            setup = f"SCRIPT = {os.path.abspath(script)!r}\n"
        replay_args = "script=SCRIPT"
    test_path = os.path.join(out_dir, f"test_{name}.py")
    symptom = describe_signature(sig)
    with open(test_path, "w", encoding="utf-8") as fh:
        fh.write(_TEST_TEMPLATE.format(symptom=symptom, bundle_dir=bundle_dir, source_setup=setup,
                                       slug=name, replay_args=replay_args))
    fix_path = os.path.join(out_dir, "FIX.md")
    with open(fix_path, "w", encoding="utf-8") as fh:
        fh.write(_fix_record(bundle, symptom, bundle_dir, test_path, shrunk, replays))
    return MadeTest(test=test_path, fix=fix_path, bundle=os.path.join(out_dir, bundle_dir))


def _module_dir(module: str) -> str:
    import importlib.util

    spec = importlib.util.find_spec(module.split(".")[0])
    if spec is None or not spec.origin:
        return os.getcwd()
    origin = os.path.dirname(os.path.abspath(spec.origin))
    # a package: its parent folder goes on sys.path
    return os.path.dirname(origin) if spec.submodule_search_locations else origin


def _fix_record(bundle: Bundle, symptom: str, bundle_dir: str, test_path: str, shrunk: Any,
                replays: int | None) -> str:
    t = bundle.trigger
    f = t.get("finding") or {}
    cmd = bundle.meta.get("command", {})
    info = bundle.meta.get("shrunk") or {}
    batch = bundle.batch()
    shapes = ", ".join(str(tuple(getattr(a, "shape", ()))) for a in batch.args) or "-"
    return msg(
        "repro.fix_template",
        symptom=symptom,
        message=f.get("message") or t.get("message") or "-",
        stage=f.get("stage") or t.get("stage") or "-",
        module=f.get("module") if f.get("module") is not None else "-",
        op=f.get("op") or "-",
        line=(f"{f.get('file')}:{f.get('line')}" if f.get("file")
              else f"{t.get('file')}:{t.get('line')}" if t.get("file") else "-"),
        step=t.get("step"),
        command=" ".join(cmd.get("argv") or []) or "-",
        cwd=cmd.get("cwd") or "-",
        samples=info.get("samples_of_original") if info.get("samples_of_original") is not None else "all",
        batch_size=info.get("batch_size") or bundle.batch_size or "-",
        prefix=info.get("prefix") if info.get("prefix") is not None else "-",
        replays=replays if replays is not None else "-",
        shapes=shapes,
        bundle=bundle_dir,
        test=os.path.basename(test_path),
        date=datetime.date.today().isoformat(),
    )
