"""`clip_grad_norm_` after `optimizer.step()` (`dynamics.clip_after_step`), judged by the norms
the misplaced clip itself returned (session 18): they are the norms of the gradients the step
applied, so a clip that would have cut most of them is a warning even when the loss still fell;
one that had nothing to cut is an info. Written the ways users write it, and the orders that stay
quiet."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import nn as tnn

from _lines import line_in
from torchtriage import Category, Severity
from torchtriage._session import Session

_line = line_in


class Seq(nn.Module):
    """A small recurrent encoder with a linear read-out (the kind of model people clip)."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(6, 16, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1])


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 5, 6, generator=g)
    y = (x[:, :, 0].sum(1) > 0).long() + (x[:, :, 1].sum(1) > 1).long()
    return x, y


def _run(loop, **kw):
    torch.manual_seed(0)
    model = Seq()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with Session(model, opt, on_anomaly="record", report=False, checks=["dynamics"]) as s:
        loop(model, opt, **kw)
    return s.report.filter(code="dynamics.clip_after_step"), s.report


# ------------------------------- 1. zero_grad at the top, the clip's norm logged after the step
def _logged(model, opt, clip=0.05, fixed=False):
    x, y = _data()
    norms = []
    for _ in range(30):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if fixed:
            norms.append(float(tnn.utils.clip_grad_norm_(model.parameters(), clip)))
        opt.step()
        if not fixed:
            norms.append(float(tnn.utils.clip_grad_norm_(model.parameters(), clip)))  # after the step


def test_clip_after_the_step_that_would_have_cut_is_a_warning():
    found, _ = _run(_logged)
    assert len(found) == 1
    f = found[0]
    assert (f.severity, f.category, f.op) == (Severity.WARNING, Category.GRADIENT, "clip_grad_norm_")
    assert f.line == _line(_logged, "# after the step")
    ev = f.evidence
    assert ev["max_norm"] == 0.05 and ev["steps_norm_above_max_norm"] * 2 > ev["steps_with_norm_read"] >= 2
    assert "would have scaled them down" in ev["harm"]


def test_clip_between_backward_and_step_is_quiet():
    found, report = _run(_logged, fixed=True)
    assert not found
    assert not [f for f in report.findings if f.severity in (Severity.WARNING, Severity.ERROR)]


def test_clip_after_the_step_with_nothing_to_cut_is_an_info():
    found, _ = _run(_logged, clip=1e4)
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.INFO and f.evidence["steps_norm_above_max_norm"] == 0
    assert "harm" not in f.evidence


# ---------------------- 2. a mini-batch loop in a helper, max_norm by keyword, zero_grad at the end
def _epoch(model, opt, loader, max_grad_norm):
    for xb, yb in loader:
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        loss.backward()
        opt.step()
        torch.nn.utils.clip_grad_norm_(parameters=model.parameters(), max_norm=max_grad_norm)  # misplaced
        opt.zero_grad(set_to_none=True)


def _batches(model, opt):
    x, y = _data()
    loader = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]
    for _ in range(6):
        _epoch(model, opt, loader, max_grad_norm=0.02)


def test_clip_after_the_step_in_a_helper_by_keyword_is_a_warning():
    found, _ = _run(_batches)
    assert len(found) == 1
    f = found[0]
    assert f.severity is Severity.WARNING and f.line == _line(_epoch, "# misplaced")
    assert f.evidence["max_norm"] == 0.02


# ------------- 3. zero_grad between the step and the clip: the clip measures nothing (norm 0)
def _zeroed_first(model, opt):
    x, y = _data()
    for _ in range(12):
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)  # after zero_grad


def test_a_clip_of_zeroed_gradients_is_not_taken_as_harm():
    found, _ = _run(_zeroed_first)
    assert len(found) == 1
    assert "harm" not in found[0].evidence and "steps_with_norm_read" not in found[0].evidence
