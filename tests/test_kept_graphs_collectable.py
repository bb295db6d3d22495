"""Model outputs that only Python's cyclic collector frees are not kept graphs
(`silent.loss_graph_kept`, session 18): an output object built per forward from a class made on
the fly, or a record that refers to itself, lives until the collector's next pass. The tests turn
the automatic collector off while the loop runs, so that only the check's own collection frees
them; the outputs a loop really keeps are still found."""

from __future__ import annotations

import gc

import torch
import torch.nn as nn
import torch.nn.functional as F

from torchtriage import Category, Severity
from torchtriage._session import Session


def _kept(loop):
    was = gc.isenabled()
    gc.disable()
    try:
        with Session(discover=True, on_anomaly="record", report=False, checks=["silent"]) as s:
            loop()
    finally:
        if was:
            gc.enable()
    return s.report.filter(code="silent.loss_graph_kept")


class OnTheFly(nn.Module):
    """Returns `type("Out", (), {"logits": ...})()`: each call makes a class, a reference cycle."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))

    def forward(self, x):
        return type("Out", (), {"logits": self.body(x)})()


class SelfReferring(nn.Module):
    """Returns a dict that holds itself (a record with a back-pointer for logging)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 3)

    def forward(self, x):
        out = {"logits": self.body(x)}
        out["self"] = out
        return out


def _loop(model, get, steps=20, keep=None):
    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
        logits = get(model(x))
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if keep is not None:
            keep.append(logits)  # kept with its graph


def test_output_on_a_class_made_per_call_is_quiet():
    assert not _kept(lambda: _loop(OnTheFly(), lambda o: o.logits))


def test_output_in_a_self_referring_record_is_quiet():
    assert not _kept(lambda: _loop(SelfReferring(), lambda o: o["logits"]))


def test_outputs_kept_in_a_list_are_still_found():
    found = _kept(lambda: _loop(OnTheFly(), lambda o: o.logits, keep=[]))
    assert len(found) == 1
    assert found[0].severity is Severity.WARNING and found[0].category is Category.MEMORY
    assert found[0].evidence["steps_alive"] >= 6
