"""A sweep that rebuilds the model but steps the first model's optimizer (session 10)."""

from __future__ import annotations

import torch
from torch import nn

import torchtriage


def _data():
    torch.manual_seed(0)
    return torch.randn(64, 4), torch.randn(64, 1)


def _mlp(hidden):
    return nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def _sweep(*, new_optimizer: bool):
    x, y = _data()
    model = _mlp(8)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    with torchtriage.watch(model, optimizer=opt, on_anomaly="record") as s:
        for _ in range(5):
            loss = ((model(x) - y) ** 2).mean()
            model.zero_grad()
            loss.backward()
            opt.step()
        for hidden in (4, 16):
            model = _mlp(hidden)
            if new_optimizer:
                opt = torch.optim.Adam(model.parameters(), lr=0.01)
            for _ in range(5):
                loss = ((model(x) - y) ** 2).mean()
                model.zero_grad()
                loss.backward()
                opt.step()  # the sweep's step
    return [f for f in s.report.findings if f.severity in ("warning", "error")]


def test_sweep_stepping_the_first_models_optimizer_is_a_warning():
    found = [f for f in _sweep(new_optimizer=False) if f.code == "gradient.step_stale_optimizer"]
    (f,) = found
    assert f.severity == "warning" and f.category == "gradient"
    assert f.evidence["source_line"] == "opt.step()  # the sweep's step"
    assert f.evidence["tensors_reached_in_no_optimizer"] == 4
    assert f.evidence["values_reached_in_no_optimizer"] == 4 * 4 + 4 + 4 + 1
    assert f.evidence["optimizer_parameters"] == 4 and f.evidence["optimizer_gradients_unchanged"] == 4
    assert f.message.startswith("Adam.step() applied gradients no backward wrote since its previous step: "
                                "the backward at test_ledger_stale_step.py:")
    assert f.step == 5  # the first step of the sweep


def test_an_optimizer_per_model_is_quiet():
    assert _sweep(new_optimizer=True) == []


def test_two_models_with_their_own_optimizers_are_quiet():
    x, y = _data()
    g, d = _mlp(8), nn.Sequential(nn.Linear(1, 8), nn.ReLU(), nn.Linear(8, 1))
    og, od = torch.optim.Adam(g.parameters(), lr=1e-3), torch.optim.Adam(d.parameters(), lr=1e-3)
    with torchtriage.watch([g, d], optimizer=[og, od], on_anomaly="record") as s:
        for _ in range(6):
            od.zero_grad()
            d(g(x).detach()).mean().backward()
            od.step()
            og.zero_grad()
            (-d(g(x)).mean()).backward()  # also writes d's gradients: d's optimizer is not stepped here
            og.step()
    assert [f for f in s.report.findings if f.code == "gradient.step_stale_optimizer"] == []


def test_gradients_on_the_input_as_well_are_quiet():
    x, y = _data()
    model = _mlp(8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchtriage.watch(model, optimizer=opt, on_anomaly="record") as s:
        for _ in range(6):
            xi = x.clone().requires_grad_(True)  # an input-gradient penalty: x.grad in no optimizer
            opt.zero_grad()
            ((model(xi) - y) ** 2).mean().backward()
            opt.step()
    assert [f for f in s.report.findings if f.code == "gradient.step_stale_optimizer"] == []


def test_new_gradients_at_a_freed_gradients_address_are_not_unchanged():
    """zero_grad(set_to_none=True) frees each .grad and the next backward may allocate its new one
    at the same address (same id, same version): a signature of ids read those as unchanged and
    warned on a loop whose stepped parameters did get fresh gradients (a flaky CI run, session 11)."""

    class Rescaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(1))
            self.lin = nn.Linear(4, 1)

        def forward(self, x):
            self.scale = nn.Parameter(torch.ones(1))  # a new leaf each call: reached by no optimizer
            return self.lin(x) * self.scale

    x, y = _data()
    for _ in range(12):  # the allocator reuses the address in most runs; twelve make a miss unlikely
        model = Rescaled()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
            for _ in range(3):
                loss = ((model(x) - y) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        assert s.report.filter(code="gradient.step_stale_optimizer") == []
