"""Our torch-function modes sit under the user's: a model called inside the user's own
`with torch.device(...)` or `with MyMode():` block leaves nothing of ours or theirs behind, and
the silent check's loss region reads the one step tape (no second mode, no second op list)."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

import torchtriage
from zoo import silent as z


def _stack():
    return [type(m).__name__ for m in torch.overrides._get_current_function_mode_stack()]


class Doubler(TorchFunctionMode):
    """A user's own mode (changes nothing; counts what it sees)."""

    def __init__(self):
        super().__init__()
        self.seen = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen += 1
        return func(*args, **(kwargs or {}))


def _line_of(text):
    with open(__file__) as fh:
        return next(i for i, line in enumerate(fh, 1) if text in line and "_line_of" not in line)


def test_model_called_inside_the_users_device_and_mode_blocks_leaves_no_mode_behind():
    torch.manual_seed(0)
    net = z.RegressionMLP()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    x, y = z.regression_data()
    after = []
    with torchtriage.watch(net, opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            opt.zero_grad()
            with torch.device("cpu"):
                out = net(x)  # the step opens here: our modes are pushed inside the user's block
            after.append(_stack())
            user = Doubler()
            with user:
                loss = ((out - y) ** 2).mean()  # (8, 1) - (8,): the loss region must still see it
            after.append(_stack())
            loss.backward()
            opt.step()
    assert torch._C._len_torch_function_stack() == 0
    for names in after:  # the user's blocks popped their own modes, not ours
        assert "DeviceContext" not in names and "Doubler" not in names, after
    assert user.seen >= 3
    (f,) = s.report.filter(code="silent.loss_broadcast")
    assert (f.op, f.file, f.line, f.evidence["broadcast_shape"]) == (
        "sub", __file__, _line_of("the loss region must still see it"), (8, 8))
    with torch.device("cpu"):  # and the user's device block still works after the run
        assert _stack() == ["DeviceContext"]
    assert _stack() == []


def test_default_device_context_stays_at_the_bottom():
    torch.set_default_device("cpu")
    try:
        net = nn.Linear(4, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        with torchtriage.watch(net, opt, on_anomaly="record", report=False):
            for _ in range(2):
                opt.zero_grad()
                net(torch.randn(8, 4)).pow(2).mean().backward()
                assert _stack()[0] == "DeviceContext"
                opt.step()
        assert _stack() == ["DeviceContext"]
    finally:
        torch.set_default_device(None)
    assert _stack() == []


def test_the_loss_region_reads_the_step_tape_even_with_the_tape_off():
    torch.manual_seed(0)
    net = z.RegressionMLP()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    x, y = z.regression_data()
    seen = []
    with torchtriage.watch(net, opt, checks=["silent"], step_tape="off", on_anomaly="record", report=False) as s:
        for _ in range(4):
            opt.zero_grad()
            loss = ((net(x) - y) ** 2).mean()
            seen.append(_stack())
            loss.backward()
            opt.step()
    # one mode on the warm-up steps (silent_warmup = 3): the step tape; none after
    assert seen == [["StepTape"]] * 3 + [[]]
    (f,) = s.report.filter(code="silent.loss_broadcast")
    assert (f.op, f.file, f.line, f.evidence["prediction_shape"], f.evidence["target_shape"]) == (
        "sub", __file__, _line_of("loss = ((net(x) - y) ** 2).mean()"), (8, 1), (8,))
