"""`own_modes_off()`: torchtriage's own arithmetic skips torchtriage's TorchFunctionModes on top
of the stack and nothing else (a user's mode, the sync audit, keep seeing every call)."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from torchtriage._modestack import own_modes_off


class Counting(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


class Ours(Counting):
    pass


Ours.__module__ = "torchtriage._step"  # as the step tape's module


def _stack():
    n = torch._C._len_torch_function_stack()
    return [torch._C._get_function_stack_at(i) for i in range(n)]


def test_our_modes_are_popped_and_put_back_in_order():
    x = torch.randn(4)
    user, ours_low, ours_top = Counting(), Ours(), Ours()
    with user, ours_low, ours_top:
        before = _stack()
        with own_modes_off():
            assert _stack() == [user]
            x.sum()
        assert _stack() == before
        x.sum()
    assert (user.calls, ours_low.calls, ours_top.calls) == (2, 1, 1)


def test_a_foreign_mode_on_top_stops_the_popping():
    x = torch.randn(4)
    ours, user = Ours(), Counting()
    with ours, user:
        with own_modes_off():
            x.sum()
    assert (ours.calls, user.calls) == (1, 1)


def test_modes_come_back_after_an_exception():
    ours = Ours()
    with ours:
        try:
            with own_modes_off():
                raise ValueError("boom")
        except ValueError:
            pass
        assert _stack() == [ours]


def test_a_mode_removed_while_set_aside_is_not_put_back():
    from torchtriage._modestack import put_back, remove_mode, set_aside

    ours, kept = Ours(), Ours()
    with kept:
        ours.__enter__()
        token = set_aside()
        assert _stack() == []
        assert remove_mode(ours)  # its owner drops it meanwhile (a window that ends)
        put_back(token)
        assert _stack() == [kept]


def test_the_optimizer_step_runs_without_our_modes_and_gets_them_back():
    import torch.nn as nn
    import torch.nn.functional as F

    import torchtriage

    seen = []

    class Probe(torch.optim.SGD):
        def step(self, closure=None):
            seen.append(torch._C._len_torch_function_stack())
            return super().step(closure)

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = Probe(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    around = []
    with torchtriage.watch(model, opt, on_anomaly="record", report=False):
        for _ in range(2):
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            before = torch._C._len_torch_function_stack()
            opt.step()
            around.append((before, torch._C._len_torch_function_stack()))
    assert around[0][0] > 0  # the first steps' tape and tracers are on the stack ...
    assert seen == [0, 0]  # ... but not inside the update
    assert around[1][0] > 0 and _stack() == []
