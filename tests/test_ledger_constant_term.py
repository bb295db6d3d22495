"""The step ledger's loss terms (issue 26): a term added to the loss that does not require grad
although it was computed from a model's output (detached inside the model) reaches nothing."""

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


class Mixer(nn.Module):
    def __init__(self, detach_inside: bool):
        super().__init__()
        self.enc = nn.Linear(8, 16)
        self.head = nn.Linear(16, 4)
        self.values = nn.Linear(16, 2 * 4)
        self.detach_inside = detach_inside

    def forward(self, x):
        h = torch.relu(self.enc(x))
        weights = torch.softmax(self.head(h), -1)
        if self.detach_inside:
            weights = weights.detach()
        mixed = (weights.unsqueeze(-1) * self.values(h).view(-1, 4, 2)).sum(1)
        return {"out": mixed, "weights": weights}


def train(detach_inside: bool, steps: int = 4):
    torch.manual_seed(0)
    net = Mixer(detach_inside)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    with torchtriage.watch(net, opt, on_anomaly="record", report=False) as s:
        for _ in range(steps):
            x, y = torch.randn(16, 8), torch.randn(16, 2)
            outputs = net(x)
            fit = F.mse_loss(outputs["out"], y)
            entropy = (outputs["weights"] * outputs["weights"].clamp_min(1e-8).log()).sum(-1).mean()  # CONST
            loss = fit + 0.1 * entropy
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


def test_a_regulariser_on_weights_detached_inside_the_model_is_named():
    [f] = [f for f in train(True) if f.code == "gradient.term_detached"]
    assert f.severity is Severity.WARNING and f.line == line_of("CONST")
    ev = f.evidence
    assert ev["reaches_models"] == "no trainable parameter" and ev["requires_grad"] is False
    assert ev["computed_from"] == ["net"] and ev["stepped_without_it"] == ["net"]
    assert "does not require grad" in f.cause


def test_the_same_regulariser_with_its_graph_is_quiet():
    assert not [f for f in train(False) if f.severity is not Severity.INFO]
