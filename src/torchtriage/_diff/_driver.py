"""`torchtriage diff`'s two sides (issue 28): each a script, a module, a script at a git
revision, or a step record saved earlier; each run in its own process as `torchtriage run
--record` runs it (`_side.py`), A first, then B seeded alike and given A's initial weights and
seed values; then the two records compared (`_compare.py`)."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import subprocess
import tarfile
import tempfile
import time
from typing import Any

from .._catalogue import msg
from .._findings import Report
from ._compare import compare
from ._side import side_argv
from ._store import is_record, load_record

_MODULE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


class DiffInputError(ValueError):
    """A side that cannot be run or read (one line: exit status 2)."""


@dataclasses.dataclass
class Side:
    name: str
    kind: str  # script | module | record
    path: str
    label: str

    def target(self, args: list[str]) -> list[str]:
        return ["-m", self.path, *args] if self.kind == "module" else [self.path, *args]


def resolve(token: str, name: str) -> Side:
    """A script (.py file), a step record folder, or a module name (as `python -m` takes it)."""
    if is_record(token):
        return Side(name, "record", token, token)
    if os.path.isfile(token):
        return Side(name, "script", token, token)
    if not token.endswith(".py") and not os.path.exists(token) and _MODULE.match(token):
        return Side(name, "module", token, f"-m {token}")
    raise DiffInputError(msg("diff.no_side", side=token))


def at_revision(script: str, rev: str, into: str) -> str:
    """`script` as it was at git revision `rev`: the repository's tree at `rev` unpacked into
    `into` (sibling modules come from the same revision); returns the script's path there."""
    folder = os.path.dirname(os.path.abspath(script)) or "."

    def git(*argv: str) -> bytes:
        done = subprocess.run(["git", "-C", folder, *argv], capture_output=True, check=False)
        if done.returncode != 0:
            reason = done.stderr.decode(errors="replace").strip().splitlines()
            raise DiffInputError(msg("diff.git_failed", rev=rev, path=script,
                                     reason=reason[-1] if reason else "git failed"))
        return done.stdout

    try:
        root = git("rev-parse", "--show-toplevel").decode().strip()
        tree = git("archive", "--format=tar", rev)
    except OSError as e:
        raise DiffInputError(msg("diff.git_failed", rev=rev, path=script, reason=str(e))) from None
    with tarfile.open(fileobj=io.BytesIO(tree)) as tar:
        tar.extractall(into, filter="data")
    path = os.path.join(into, os.path.relpath(os.path.abspath(script), os.path.realpath(root)))
    if not os.path.isfile(path):
        raise DiffInputError(msg("diff.git_failed", rev=rev, path=script, reason="not in that revision"))
    return path


def record_side(side: Side, args: list[str], folder: str, *, steps: int, seed: int | None,
                reference: str | None) -> tuple[dict[str, Any], float]:
    """The side's step record (run now, unless it is one already) and the seconds it took."""
    if side.kind == "record":
        return load_record(side.path), 0.0
    start = time.perf_counter()
    done = subprocess.run(side_argv(folder, side.target(args), steps=steps, seed=seed, reference=reference),
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if not is_record(folder):
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
        raise DiffInputError(msg("diff.side_failed", side=side.label, code=done.returncode, steps=steps, tail=tail))
    record = load_record(folder)
    record["target"] = side.label
    if not record.get("ops"):
        raise DiffInputError(msg("diff.no_steps", side=side.label))
    return record, seconds


def diff_sides(a: Side, b: Side, args: list[str], *, steps: int = 3, seed: int | None = 0) -> Report:
    """Run (or read) both sides and compare them."""
    with tempfile.TemporaryDirectory(prefix="torchtriage-diff-") as tmp:
        folder_a = a.path if a.kind == "record" else os.path.join(tmp, "a")
        ra, sec_a = record_side(a, args, folder_a, steps=steps, seed=seed, reference=None)
        if a.kind == "record":
            steps = int(ra.get("steps", steps))
        rb, sec_b = record_side(b, args, os.path.join(tmp, "b"), steps=steps, seed=seed, reference=folder_a)
    ra.setdefault("target", a.label)
    rb.setdefault("target", b.label)
    report = compare(ra, rb)
    meta = dict(report.meta)
    meta["diff"] = dict(meta["diff"], wall_seconds=[round(sec_a, 3), round(sec_b, 3)])
    return Report(report.findings, meta=meta, series=report.series)


