"""A bug corpus: real training loops from `tests/corpus/` with ONE bug injected as users make it.

One file per case. Each file's docstring names the source and commit of the original loop (the
corpus file it was copied from), the mutation in one line (`Mutation:`) and the finding a user
should get (`Expected:`). The line the finding should name carries the comment `# <- bug`.
Each file defines `build()` returning `(models, optimizers, train)` like the corpus loops, and
`python FILE` runs it as a script (for `torchtriage run`). `tests/test_bug_corpus.py` holds the
expected findings and marks the gaps.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).parent
CASES: list[str] = sorted(p.stem for p in HERE.glob("*.py") if not p.stem.startswith("_"))
MARK = "# <- bug"


def load(name: str) -> ModuleType:
    return importlib.import_module(f"bugs.{name}")


def bug_file(name: str) -> Path:
    """The file holding the bug: the case's own, or the helper it names in `BUG_FILE`."""
    return HERE / getattr(load(name), "BUG_FILE", f"{name}.py")


def bug_line(name: str) -> int:
    """The 1-based line of the bug file that carries the `# <- bug` marker."""
    lines = bug_file(name).read_text(encoding="utf-8").splitlines()
    hits = [i for i, text in enumerate(lines, 1) if MARK in text]
    assert len(hits) == 1, f"{name}: exactly one line must carry {MARK!r}, found {hits}"
    return hits[0]
