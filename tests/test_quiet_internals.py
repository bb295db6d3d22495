"""No internal errors and no torchtriage frames on correct code (issue 10): a view made under
no_grad is read without error, the user's traceback under `watch` is the one Python shows
without torchtriage, and torchtriage's warnings name the user's line."""

from __future__ import annotations

import traceback
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage._gradients._graph import leaves_of, reach


def test_a_view_made_under_no_grad_has_an_unknown_graph_not_an_error():
    a = torch.randn(3, requires_grad=True).clone()
    with torch.no_grad():
        v = a[:2]
    a.mul_(2)  # now torch refuses to give v.grad_fn
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
        v.grad_fn  # noqa: B018
    assert leaves_of(v) == set()
    assert reach([v]).complete is False


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, bad: bool = False) -> torch.Tensor:
        y = self.fc(x)
        return y.view(-1, 5) if bad else y  # 6 x 3 = 18 elements: not a multiple of 5


def _frames_of(fail) -> list[tuple[str, int, str]]:
    try:
        fail()
    except RuntimeError as e:
        return [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(e.__traceback__)]
    raise AssertionError("did not raise")


def _train_then(model, opt, bad):
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    bad(model, x, y)


def _forward_raises(model, x, y):
    model(x, bad=True)  # the user's own forward raises


def _loss_raises(model, x, y):
    F.cross_entropy(model(x), y.float())  # float class targets of the wrong shape


def _backward_raises(model, x, y):
    model(x).sum().backward()
    model(x).sum().backward(torch.ones(2))  # a wrong gradient shape


@pytest.mark.parametrize("bad", [_forward_raises, _loss_raises, _backward_raises], ids=["forward", "loss", "backward"])
def test_traceback_under_watch_is_the_plain_one(bad):
    def plain():
        torch.manual_seed(0)
        model = Net()
        _train_then(model, torch.optim.SGD(model.parameters(), lr=0.1), bad)

    def watched():
        torch.manual_seed(0)
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with torchtriage.watch(model, opt, on_anomaly="record", report=False):
            _train_then(model, opt, bad)

    expected, got = _frames_of(plain), _frames_of(watched)
    assert not [f for f in got if "torchtriage" in f[0]], got
    # The same frames of the user's code below the two callers (their own lines differ by
    # construction; torch's module call takes its hooked path while hooks are on).
    mine = lambda frames: [f for f in frames[2:] if f[0] == __file__]  # noqa: E731
    assert mine(got) == mine(expected), (got, expected)
    assert got[-1] == expected[-1]


class LogOfRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.relu(self.fc(x)))


def test_warnings_name_the_users_line():
    torch.manual_seed(0)
    model = LogOfRelu()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with torchtriage.watch(model, opt, on_anomaly="warn", report=False):
            loss = model(x).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    ours = [w for w in seen if issubclass(w.category, torchtriage.TriageWarning)]
    assert ours, [str(w.message) for w in seen]
    assert {w.filename for w in ours} == {__file__}, [(w.filename, w.lineno) for w in ours]
