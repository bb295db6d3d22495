"""Weights kept as plain tensors (session 12): a tensor multiplied into the forward that is not an
nn.Parameter gets no gradient and never trains. Written as users write them (peephole gates made
lazily, a ReZero gain, a LayerScale made with torch.ones in a functional-style block); the
look-alikes (a registered buffer, a mask, a fixed random projection) stay quiet or info."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import marked
from torchtriage import Severity

HERE = str(Path(__file__))


line_of = marked(Path(HERE))


def plain(report, severity=None):
    return [f for f in report if f.code == "gradient.plain_weight" and (severity is None or f.severity is severity)]


def train(model, make_batch, steps=6, lr=1e-2):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(steps):
            x, y = make_batch()
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


class GatedCell(nn.Module):
    """A recurrent cell whose peephole weights are made on the first call."""

    def __init__(self, n):
        super().__init__()
        self.wx = nn.Linear(n, n)
        self.wh = nn.Linear(n, n)
        self.peep = None

    def forward(self, x):
        if self.peep is None:
            self.peep = torch.zeros(x.shape[-1])  # PEEP
        c = torch.zeros_like(x)
        for _ in range(3):
            gate = torch.sigmoid(self.wx(x) + self.wh(c) + c * self.peep)
            c = gate * torch.tanh(self.wx(x)) + (1 - gate) * c
        return c


def test_lazily_made_peephole_weights_are_named_at_their_assignment():
    torch.manual_seed(0)
    report = train(GatedCell(8), lambda: (torch.randn(16, 8), torch.randn(16, 8)))
    [f] = plain(report)
    assert f.severity is Severity.WARNING and f.line == line_of("PEEP") and f.parameter == "peep"
    ev = f.evidence
    assert ev["tensors"] == ["peep"] and ev["values"] == 8 and ev["min"] == ev["max"] == 0.0
    assert ev["used_in"] == ["Mul"] and ev["module_class"] == "GatedCell" and ev["registered"] is False


class ReZeroBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ff = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d))
        self.alpha = torch.zeros(1, d)  # ALPHA

    def forward(self, x):
        return x + self.alpha * self.ff(x)


def test_a_rezero_gain_kept_as_a_tensor_is_named():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), ReZeroBlock(16), ReZeroBlock(16), nn.Linear(16, 1))
    report = train(model, lambda: (torch.randn(32, 4), torch.randn(32, 1)))
    [f] = plain(report)
    assert f.severity is Severity.WARNING and f.line == line_of("ALPHA")
    assert f.evidence["tensors"] == ["1.alpha", "2.alpha"] and f.evidence["count"] == 2
    assert f.module == "1"


def layer_scale_block(d):
    block = nn.Module()
    block.proj = nn.Linear(d, d)
    block.gamma = torch.ones(d) * 1.0  # a LayerScale gain, never made a Parameter
    return block


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([layer_scale_block(12) for _ in range(2)])

    def forward(self, x):
        for b in self.blocks:
            x = x + F.relu(b.proj(x)).mul(b.gamma)
        return x


def test_a_layer_scale_of_ones_assigned_from_outside_the_class_is_named():
    torch.manual_seed(0)
    report = train(Net(), lambda: (torch.randn(8, 12), torch.randn(8, 12)))
    [f] = plain(report)
    assert f.severity is Severity.WARNING and f.evidence["min"] == f.evidence["max"] == 1.0
    assert f.evidence["tensors"] == ["blocks.0.gamma", "blocks.1.gamma"]


# ---------------------------------------------------------------------------- look-alikes
class Fixed(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.register_buffer("scale", torch.ones(d))
        self.gain = nn.Parameter(torch.zeros(d))
        self.proj = torch.randn(d, d) / d ** 0.5  # a fixed random projection (a constant)
        self.mask = torch.tril(torch.ones(d, d))

    def forward(self, x):
        h = self.lin(x) * self.scale + self.gain * x
        return (h @ (self.proj * self.mask)) @ self.proj


def test_buffers_parameters_masks_and_a_fixed_projection_are_not_warnings():
    torch.manual_seed(0)
    report = train(Fixed(8), lambda: (torch.randn(16, 8), torch.randn(16, 8)))
    assert not plain(report, Severity.WARNING)
    assert {f.parameter for f in plain(report)} <= {"proj", "mask"}
