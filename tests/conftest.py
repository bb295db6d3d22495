"""Shared fixtures. Tests run with warnings as errors (pyproject), one torch thread each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
GOLDEN = ROOT / "tests" / "golden"

# `pytester` (end-to-end tests of our pytest plugin) must be requested from this top-level
# conftest: recent pytest refuses `pytest_plugins` in test modules and nested conftests.
pytest_plugins = ["pytester"]


def pytest_addoption(parser):
    parser.addoption("--overwrite", action="store_true", default=False,
                     help="rewrite tests/golden/* from the current renderers instead of comparing")


@pytest.fixture
def expect_golden(request):
    """`expect_golden(name, text)`: assert `text` equals tests/golden/NAME, or rewrite it with --overwrite."""
    overwrite = request.config.getoption("--overwrite")

    def check(name: str, text: str) -> None:
        path = GOLDEN / name
        if overwrite:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        assert path.exists(), f"{path} is missing; create it with `pytest --overwrite`"
        expected = path.read_text(encoding="utf-8")
        assert text == expected, f"{name} differs from the golden file; review and rerun with --overwrite"

    return check


@pytest.fixture(autouse=True)
def _seed_and_no_leaked_hooks():
    """Every test starts seeded and must leave no global hook or patch behind."""
    from torch.nn.modules import module as m
    from torch.optim import optimizer as o

    torch.manual_seed(0)
    before = (len(m._global_forward_hooks), len(m._global_forward_pre_hooks),
              len(o._global_optimizer_pre_hooks), len(o._global_optimizer_post_hooks),
              torch.autograd.backward, torch.nn.functional.cross_entropy, torch.optim.Optimizer.__init__)
    yield
    after = (len(m._global_forward_hooks), len(m._global_forward_pre_hooks),
             len(o._global_optimizer_pre_hooks), len(o._global_optimizer_post_hooks),
             torch.autograd.backward, torch.nn.functional.cross_entropy, torch.optim.Optimizer.__init__)
    assert before == after, "a torchtriage hook or patch was left installed"


def run_cli(*args: str, cwd: str | os.PathLike[str] | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run `python -m torchtriage ARGS` in a subprocess; returns the completed process."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "torchtriage", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)
