"""A 'best' snapshot kept as model.state_dict() (references) and restored at the end (session 10)."""

from __future__ import annotations

import copy

import torch
from torch import nn

import torchtriage


def _fit(snapshot, *, reload_at_once: bool = False, epochs: int = 12):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 4), torch.randn(64, 1)
    best = None
    with torchtriage.watch(model, optimizer=opt, on_anomaly="record") as s:
        for epoch in range(epochs):
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if epoch == 3:
                best = snapshot(model)
                if reload_at_once:
                    model.load_state_dict(best)
        if not reload_at_once:
            model.load_state_dict(best)  # the restore line
    return s.report.findings


def _aliased(findings):
    return [f for f in findings if f.code == "checkpoint.snapshot_aliased"]


def test_reference_snapshot_restored_after_training_is_a_warning():
    (f,) = _aliased(_fit(lambda m: m.state_dict()))
    assert f.severity == "warning" and f.category == "other"
    assert f.evidence["source_line"] == "model.load_state_dict(best)  # the restore line"
    assert f.evidence["parameters"] == 4 and f.evidence["parameters_sharing_storage"] == 4
    assert f.evidence["snapshot_step"] == 4 and f.evidence["load_step"] == 12
    assert f.evidence["parameter_writes_since_snapshot"] == 8 * 4
    assert f.evidence["snapshot_line"].startswith("test_ledger_snapshot_aliased.py:")
    assert "8 optimizer steps have written them since" in f.message
    assert "copy.deepcopy" in f.next_check


def test_keep_vars_snapshot_is_the_same_bug():
    assert len(_aliased(_fit(lambda m: m.state_dict(keep_vars=True)))) == 1


def test_deepcopy_snapshot_is_quiet():
    assert _aliased(_fit(lambda m: copy.deepcopy(m.state_dict()))) == []


def test_cloned_snapshot_is_quiet():
    assert _aliased(_fit(lambda m: {k: v.detach().clone() for k, v in m.state_dict().items()})) == []


def test_reference_snapshot_loaded_before_any_update_is_quiet():
    assert _aliased(_fit(lambda m: m.state_dict(), reload_at_once=True)) == []


def test_checkpoint_of_another_model_is_quiet():
    torch.manual_seed(0)
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    opt = torch.optim.SGD(a.parameters(), lr=0.1)
    sd = b.state_dict()  # b's own tensors: loading them into a restores b's weights
    with torchtriage.watch(a, optimizer=opt, on_anomaly="record") as s:
        for _ in range(3):
            opt.zero_grad()
            a(torch.randn(2, 3)).sum().backward()
            opt.step()
        a.load_state_dict(sd)
    assert _aliased(s.report.findings) == []
    assert torch.equal(a.weight, b.weight)
