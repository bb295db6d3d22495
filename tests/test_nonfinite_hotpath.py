"""The sentinel's cheap per-step path: what it reads is still exact (kinds, dtypes, containers),
and the caches that make the hooks cheap follow the state they cache."""

from __future__ import annotations

import collections
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._pytree import tree_leaves

import torchtriage
from torchtriage import Severity, Stage, _frames
from torchtriage._checker import Checker
from torchtriage._nonfinite._replay import _unpack, float_leaves
from torchtriage._nonfinite._sentinel import _read


def _watch(model, opt=None, **kw):
    return torchtriage.watch(model, opt, checks=["nonfinite"], on_anomaly="record", report=False, **kw)


def _errors(s):
    return [f for f in s.report.findings if f.severity is not Severity.INFO]


def _steps(model, opt, n, x, y):
    for _ in range(n):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


class InfState(torch.optim.Optimizer):
    """SGD that also accumulates grad**2 * 1e38 in its state: the state overflows, the parameters
    stay finite (the update reads only the gradient)."""

    def __init__(self, params):
        super().__init__(params, {"lr": 1e-3})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                acc = self.state[p].setdefault("acc", torch.zeros_like(p))
                acc.add_(p.grad * p.grad * 1e38 + 1e38)
                p.add_(p.grad, alpha=-group["lr"])


def test_optimizer_state_non_finite_while_parameters_stay_finite():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = InfState(model.parameters())
    with _watch(model, opt) as s:
        _steps(model, opt, 3, torch.randn(8, 4), torch.randn(8, 1))
    assert all(torch.isfinite(p).all() for p in model.parameters())
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step, f.evidence.get("lr")) == (
        "numerical.nonfinite_optimizer_state", Stage.OPTIMIZER, 0, 1e-3)
    assert f.parameter in {"weight", "bias"}


def test_bfloat16_parameters_mixed_with_float32_flags():
    torch.manual_seed(0)
    model = nn.Linear(4, 1).to(torch.bfloat16)
    x, y = torch.randn(8, 4, dtype=torch.bfloat16), torch.randn(8, 1, dtype=torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with _watch(model, opt) as s:
        _steps(model, opt, 3, x, y)
    assert _errors(s) == [] and len(s.series["grad_norm"]) == 3
    opt = torch.optim.SGD(model.parameters(), lr=1e38)  # lr * grad overflows bfloat16: inf
    with _watch(model, opt) as s:
        _steps(model, opt, 2, x, y * 1e4)
    f = _errors(s)[0]
    assert (f.code, f.stage, f.step) == ("numerical.nonfinite_update", Stage.OPTIMIZER, 0)


def test_read_promotes_mixed_dtypes_exactly():
    flags = [torch.tensor(1.5), torch.tensor(float("inf"), dtype=torch.float16),
             torch.tensor(-2.0, dtype=torch.bfloat16), torch.tensor(1e300, dtype=torch.float64)]
    assert _read(flags) == [1.5, float("inf"), -2.0, 1e300]
    assert _read([torch.tensor(float("nan"))])[0] != _read([torch.tensor(float("nan"))])[0]


Pair = collections.namedtuple("Pair", "a b")


@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    aux: object = None


def test_float_leaves_fast_path_matches_pytree():
    a, b, c = torch.randn(2), torch.randn(3, dtype=torch.float64), torch.randn(2, dtype=torch.complex64)
    i = torch.arange(3)
    cases = [a, i, (a, i, None, 3, "x"), ((a, i), {}), ([a, {"k": b, "j": [c, 1.5]}], {"m": a}),
             {"z": b, "a": a}, Pair(a, b), Out(a, [b]), ((Pair(a, i),), {"o": Out(c)}), (), None]
    for obj in cases:
        expected = [t for t in tree_leaves(_unpack(obj))
                    if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())]
        got = float_leaves(obj)
        assert len(got) == len(expected) and all(g is e for g, e in zip(got, expected)), obj


def test_user_file_cache_follows_extra_library_roots(tmp_path):
    path = str(tmp_path / "train.py")
    assert _frames.is_user_file(path)
    _frames._extra_library_roots.append(str(tmp_path))
    try:
        assert not _frames.is_user_file(path)
    finally:
        _frames._extra_library_roots.remove(str(tmp_path))
    assert _frames.is_user_file(path)


class CountSteps(Checker):
    name = "count_steps"

    def __init__(self):
        super().__init__()
        self.begun = 0

    def on_step_begin(self, step):
        self.begun += 1


def test_a_checker_added_after_the_start_gets_events():
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    late = CountSteps()
    with _watch(model, opt) as s:
        _steps(model, opt, 1, torch.randn(8, 4), torch.randn(8, 1))
        s.checkers.append(late)
        _steps(model, opt, 2, torch.randn(8, 4), torch.randn(8, 1))
    assert late.begun == 2
