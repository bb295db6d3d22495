"""The session's one `zero_grad` wrapper (`_zerograd.py`): every listener hears each reset before
it runs, with the object, its kind and the calling line's frame; a listener's bug is reported
once and the user's reset still happens; the wrappers go on exit and come back on re-entry."""

from __future__ import annotations

import sys
import warnings

import torch
import torch.nn as nn

import torchtriage
from torchtriage._errors import TriageInternalWarning
from torchtriage._zerograd import on_zero_grad


def _model_and_opt():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_listeners_hear_every_reset_with_its_kind_and_caller():
    model, opt = _model_and_opt()
    torch_own = (torch.optim.Optimizer.zero_grad, nn.Module.zero_grad)
    heard_a, heard_b = [], []
    with torchtriage.watch(model, opt, report=False) as session:
        on_zero_grad(session, "test.a", lambda obj, kind, caller: heard_a.append((obj, kind, caller.f_code.co_name)))
        on_zero_grad(session, "test.b", lambda obj, kind, caller: heard_b.append(kind))
        model(torch.ones(4, 3)).sum().backward()
        opt.zero_grad()
        model.zero_grad()
    here = sys._getframe().f_code.co_name
    assert heard_a == [(opt, "optimizer", here), (model, "module", here)]
    assert heard_b == ["optimizer", "module"]
    assert all(p.grad is None for p in model.parameters())  # the user's resets ran
    # after exit: torch's own methods again, no listener called
    assert (torch.optim.Optimizer.zero_grad, nn.Module.zero_grad) == torch_own
    opt.zero_grad()
    assert len(heard_a) == 2
    # a second entry of the same session installs them again, for the listeners registered then
    with session:
        on_zero_grad(session, "test.c", lambda obj, kind, caller: heard_b.append("again " + kind))
        opt.zero_grad()
    assert heard_b == ["optimizer", "module", "again optimizer"] and len(heard_a) == 2


def test_a_listener_that_raises_warns_once_and_the_reset_still_runs():
    model, opt = _model_and_opt()

    def broken(obj, kind, caller):
        raise RuntimeError("boom")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torchtriage.watch(model, opt, report=False) as session:
            on_zero_grad(session, "test.broken", broken)
            model(torch.ones(4, 3)).sum().backward()
            opt.zero_grad()
            assert all(p.grad is None for p in model.parameters())
            model(torch.ones(4, 3)).sum().backward()
            opt.zero_grad()
    internal = [w for w in caught if issubclass(w.category, TriageInternalWarning)]
    assert len(internal) == 1 and "test.broken" in str(internal[0].message)
    assert all(p.grad is None for p in model.parameters())
