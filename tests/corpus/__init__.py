"""A clean corpus: correct training loops taken from public projects (issue 13).

One file per loop. Each file's docstring names the source repository, the path of the file the
loop comes from and the commit it was read at, and says what was reduced (sizes, data, steps).
Each file defines `build()`, which returns `(models, optimizers, train)`: the models and
optimizers as the original builds them, and `train()` running a few real steps of the original
loop's structure (its masks, checkpointing, EMA, samplers, accumulation, evaluation) on tiny
synthetic data. `python FILE` runs it as a script (for `torchtriage run`).

A file may set `NEEDS = ("transformers",)`: the optional packages it imports inside `build()`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).parent
LOOPS: list[str] = sorted(p.stem for p in HERE.glob("*.py") if not p.stem.startswith("_"))


def load(name: str) -> ModuleType:
    return importlib.import_module(f"corpus.{name}")
