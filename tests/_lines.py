"""`line_in`: the 1-based line a test expects a finding to name, found by a marker in the source.

One implementation for every test: `where` is a file (a `Path`, or a `str` naming an existing
file), a function / class / module (its lines in its file), or source text (dedented, as the
tests hand it to `exec` or write it to a script)."""

from __future__ import annotations

import inspect
import os
import textwrap
from pathlib import Path
from typing import Callable

import torch

import torchtriage


def _numbered(where) -> list[tuple[int, str]]:
    if isinstance(where, Path) or (isinstance(where, str) and "\n" not in where and os.path.isfile(where)):
        lines = Path(where).read_text(encoding="utf-8").splitlines()
        return list(enumerate(lines, 1))
    if isinstance(where, str):
        return list(enumerate(textwrap.dedent(where).splitlines(), 1))
    src, start = inspect.getsourcelines(where)
    return list(enumerate(src, max(start, 1)))


def line_in(where, text: str = "# HERE", *, ending: bool = False, unique: bool = False) -> int:
    """The first line of `where` that contains `text` (ends with it when `ending`); with
    `unique`, exactly one line may match."""
    hits = [i for i, line in _numbered(where) if (line.rstrip().endswith(text) if ending else text in line)]
    assert hits, f"{text!r} not in {where!r}"
    assert not unique or len(hits) == 1, (text, hits)
    return hits[0]


def marked(where) -> Callable[[str], int]:
    """`line_of(marker)` for `where`: the line ending with the comment `# marker`."""
    return lambda marker: line_in(where, f"# {marker}", ending=True)


def run_watched(make, *args):
    """Run a zoo program `make(*args) -> (model, opt, train)` under `watch`; its report."""
    model, opt, train = make(*args)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        train()
    return s.report


def run_silent(model, loop, code: str, discover: bool = False):
    """Run `loop(model, opt)` (Adam at 1e-3) under the silent checks, watching `model` and its
    optimizer (or discovering them); the report's findings with id `code`."""
    from torchtriage._session import Session

    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    kw = dict(on_anomaly="record", report=False, checks=["silent"])
    with (Session(discover=True, **kw) if discover else Session(model, opt, **kw)) as s:
        loop(model, opt)
    return s.report.filter(code=code)

