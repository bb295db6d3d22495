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
from torch.overrides import TorchFunctionMode

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


def _frames_of(fail) -> list[tuple[str, int | None, str]]:
    """The traceback's frames below the test's two callers (whose own lines differ by
    construction); `nn.Module._call_impl`'s line is left out: it runs its hooked path (another
    line of the same frame) while any module hook is registered."""
    try:
        fail()
    except RuntimeError as e:
        frames = traceback.extract_tb(e.__traceback__)[2:]
        return [(f.filename, None if f.name == "_call_impl" else f.lineno, f.name) for f in frames]
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


def _plain_and_watched(bad) -> tuple[list, list]:
    """The frames of `bad`'s error, two steps into a loop, without torchtriage and under `watch`."""
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

    return _frames_of(plain), _frames_of(watched)


@pytest.mark.parametrize("bad", [_forward_raises, _loss_raises, _backward_raises], ids=["forward", "loss", "backward"])
def test_traceback_under_watch_is_the_plain_one(bad):
    expected, got = _plain_and_watched(bad)
    assert not [f for f in got if "torchtriage" in f[0]], got
    # nor torch's frames that only our modes and hooks put there (handle_torch_function, inner)
    assert got == expected, (got, expected)


def _frames_caught_inside(bad, steps) -> tuple[list, list]:
    """The frames of `bad`'s error, caught *inside* the session (as a loop that skips a bad
    batch does), after `steps` steps; and the plain run's. The session's exit cannot trim a
    traceback it never sees: our pass-through frames trim what is below them as the error
    passes."""
    def loop(model, opt):
        x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
        for _ in range(steps):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        bad(model, x, y)

    def plain():
        torch.manual_seed(0)
        model = Net()
        loop(model, torch.optim.SGD(model.parameters(), lr=0.1))

    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False):
        got = _frames_of(lambda: loop(model, opt))
    return _frames_of(plain), got


@pytest.mark.parametrize("steps", [0, 3], ids=["first_step", "steady"])
@pytest.mark.parametrize("bad", [_forward_raises, _loss_raises, _backward_raises], ids=["forward", "loss", "backward"])
def test_an_error_caught_inside_the_session_shows_one_frame_of_ours_at_most(bad, steps):
    expected, got = _frames_caught_inside(bad, steps)
    ours = [f for f in got if "torchtriage" in f[0]]
    assert len(ours) <= 1, got
    rest = [f for f in got if "torchtriage" not in f[0]]
    if steps and bad is not _forward_raises:
        # no mode of ours on the stack, no module call: the plain traceback, plus our one frame
        assert rest == expected, (got, expected)
        return

    # What no frame of ours can unlink, because it sits above our one frame: in the first steps
    # a torch function written in Python (`Tensor.backward`) dispatches to our mode (its
    # handle_torch_function line, handle_torch_function); and a watched model's call takes
    # torch's hooked path (`_call_impl`'s nested `inner`). Everything else is the plain traceback.
    def shape(frames):
        out = []
        for file, _, name in frames:
            if name not in ("handle_torch_function", "inner") and (not out or out[-1] != (file, name)):
                out.append((file, name))
        return out

    assert shape(rest) == shape(expected), (got, expected)


class Passthrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _users_mode_and_hook(model, x, y):
    criterion = nn.CrossEntropyLoss()
    criterion.register_forward_hook(lambda m, a, out: None)  # the user's own hook: torch's `inner` frame stays
    with Passthrough():  # the user's own mode: its handle_torch_function frames stay
        criterion(model(x), y.float())


def test_the_users_own_modes_and_hooks_keep_their_frames():
    expected, got = _plain_and_watched(_users_mode_and_hook)
    assert [f[2] for f in expected].count("handle_torch_function") == 1, expected
    assert [f[2] for f in expected].count("inner") == 1, expected
    assert got == expected, (got, expected)


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


def _broken(*args, **kwargs):
    raise RuntimeError("a bug of ours")


def test_internal_warnings_name_the_users_line(monkeypatch):
    """Our own bugs warn (never kill the step) at the user's line, not at our wrappers'."""
    from torchtriage._dynamics._order import StepOrder
    from torchtriage._dynamics._schedules import ScheduleWatch
    from torchtriage._nonfinite._sentinel import NonFiniteSentinel

    monkeypatch.setattr(StepOrder, "clipped", _broken)
    monkeypatch.setattr(ScheduleWatch, "called", _broken)
    monkeypatch.setattr(NonFiniteSentinel, "on_optimizer_step_post", _broken)
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with torchtriage.watch(model, opt, report=False):
            for _ in range(2):
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
    ours = [w for w in seen if issubclass(w.category, torchtriage.TriageInternalWarning)]
    where = {str(w.message).split(" was ignored")[0]: (w.filename, w.lineno) for w in ours}
    assert set(where) == {f"torchtriage: an internal error in {w}" for w in
                          ("dynamics.clip", "dynamics.scheduler", "nonfinite.on_optimizer_step_post")}, where
    assert {f for f, _ in where.values()} == {__file__}, where


def test_internal_warnings_of_triage_name_the_users_line(monkeypatch):
    from torchtriage._triage import _context

    monkeypatch.setattr(_context, "sites_of", _broken)
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="shape"):
            with torchtriage.watch(model, opt, report=False):
                _train_then(model, opt, _forward_raises)
    ours = [(str(w.message), w.filename) for w in seen if issubclass(w.category, torchtriage.TriageInternalWarning)]
    assert ours and {f for _, f in ours} == {__file__}, ours
