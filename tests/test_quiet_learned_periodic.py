"""Correct code that looked like a bug to four checks (Graph-WaveNet and DrQ-v2 loops of the
development half): a module initialised in place under no_grad is not cut from the graph; a
softmax of learned weights alone is a parameterisation (info), attention from the data is not;
a calendar channel that repeats every day is no overlapping window; a gradient spike followed by a
slow rise of an RL-like loss harmed nothing at once."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import line_in
from torchtriage import Finding, Severity
from torchtriage._dynamics._harm import HarmGate
from torchtriage._findings import Category


def _watch(model, opt, steps, batch):
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for step in range(steps):
            x, y = batch(step)
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


_line = line_in


class AdaptiveGraph(nn.Module):
    """Graph-WaveNet's adaptive adjacency: softmax over rows of E1 @ E2, applied as A[v, w]
    summed over v; the last block's output is computed and not used (as the original does)."""

    def __init__(self, nodes=6, ch=4, over=1):
        super().__init__()
        self.e1 = nn.Parameter(torch.randn(nodes, 3))
        self.e2 = nn.Parameter(torch.randn(3, nodes))
        self.start = nn.Conv2d(ch, ch, 1)
        self.mix = nn.Conv2d(ch, ch, 1)
        self.last = nn.Conv2d(ch, ch, 1)
        self.norm = nn.BatchNorm2d(ch)
        self.over = over

    def forward(self, x):  # x: (B, C, N, T)
        adj = F.softmax(F.relu(torch.mm(self.e1, self.e2)), dim=self.over)
        h = self.mix(torch.einsum("ncvl,vw->ncwl", self.start(x), adj))
        unused = self.norm(self.last(h))  # noqa: F841  (the original's dead last block)
        return h.mean(dim=(1, 3))


def test_a_learned_adjacency_normalized_on_the_other_axis_is_info_and_dead_layers_are_not_cut():
    torch.manual_seed(0)
    model = AdaptiveGraph()
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        with torch.no_grad():  # parameters initialised in place under no_grad inside the run
            nn.init.ones_(model.norm.weight)
            model.last.weight.is_contiguous()
        opt = torch.optim.Adam(model.parameters(), 1e-2)
        for _ in range(4):
            loss = F.mse_loss(model(torch.randn(8, 4, 6, 5)), torch.randn(8, 6))
            opt.zero_grad()
            loss.backward()
            opt.step()
    report = s.report
    [f] = report.filter(code="silent.softmax_not_contracted_axis")
    assert (f.severity, f.line, f.evidence["inputs"]) == (Severity.INFO, _line(AdaptiveGraph.forward, "F.softmax("),
                                                         "parameters only")
    assert (f.evidence["normalized_dim"], f.evidence["contracted_dim"]) == (1, 0)
    assert not report.filter(code="gradient.cut_no_grad"), str(report)


class Attend(nn.Module):
    """Attention from the data, normalized over the queries instead of the keys."""

    def __init__(self, d=8):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):  # (B, T, d)
        w = F.softmax(torch.bmm(self.q(x), self.k(x).transpose(1, 2)), dim=1)
        return torch.bmm(w, self.v(x)).mean(1)


def test_attention_from_the_data_on_the_wrong_axis_stays_a_warning():
    torch.manual_seed(0)
    model = Attend()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    report = _watch(model, opt, 3, lambda _: (torch.randn(4, 6, 8), torch.randn(4, 8)))
    [f] = report.filter(code="silent.softmax_not_contracted_axis")
    assert (f.severity, f.evidence["inputs"]) == (Severity.WARNING, "computed from the data")


def test_a_calendar_channel_repeating_each_day_is_no_overlapping_window():
    rng = np.random.default_rng(0)
    steps, day = 24 * 12, 24
    tod = (np.arange(steps) % day) / day  # the same values every day
    speed = rng.normal(size=(steps, 5)).astype(np.float32)
    series = np.stack([speed, np.repeat(tod[:, None], 5, 1).astype(np.float32)])  # (2, steps, nodes)
    windows = np.stack([series[:, t:t + 8].transpose(0, 2, 1) for t in range(steps - 8)])  # (n, 2, nodes, 8)
    cut = int(0.7 * len(windows))
    train = torch.utils.data.TensorDataset(torch.tensor(windows[:cut]), torch.randn(cut, 5))
    val = torch.utils.data.TensorDataset(torch.tensor(windows[cut + 8:]), torch.randn(len(windows) - cut - 8, 5))
    model = nn.Sequential(nn.Flatten(), nn.Linear(2 * 5 * 8, 5))
    opt = torch.optim.SGD(model.parameters(), 0.01)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(2):
            for x, y in torch.utils.data.DataLoader(train, batch_size=32, shuffle=True):
                loss = F.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            with torch.no_grad():
                for x, y in torch.utils.data.DataLoader(val, batch_size=32):
                    F.mse_loss(model(x), y)
    assert not s.report.filter(code="data.split_overlap"), str(s.report)


def _spike(step):
    return Finding(category=Category.GRADIENT, code="dynamics.exploding_gradients", message="m",
                   severity=Severity.WARNING, step=step)


def test_a_spike_after_a_loss_near_zero_that_then_falls_is_info():
    gate = HarmGate()
    for i in range(300):  # a DQN's TD loss: ~0 before rewards arrive, up with them, then falling
        gate.loss(i, 1e-4 if i < 100 else 0.05 - 0.0001 * (i - 100))
        if i == 100:
            gate.hold(_spike(100))
    [f] = gate.release()
    assert f.severity is Severity.INFO


def test_a_spike_then_a_slow_rise_of_the_loss_is_info():
    gate = HarmGate()
    for i in range(300):  # an RL critic's loss: flat, then growing with its targets long after
        gate.loss(i, 0.2 + 0.001 * (i % 3) + (0.002 * (i - 150) if i > 150 else 0.0))
        if i == 100:
            gate.hold(_spike(100))
    [f] = gate.release()
    assert f.severity is Severity.INFO and f.evidence["run_kept_learning"] is True
    assert f.evidence["loss_before_finding"] == f.evidence["loss_at_finding"]


def test_a_spike_that_throws_the_loss_up_at_once_is_a_warning():
    gate = HarmGate()
    for i in range(200):
        gate.loss(i, 0.2 + 0.001 * (i % 3) if i < 100 else 3.0 + 0.02 * (i - 100))  # up at once, and on up
        if i == 100:
            gate.hold(_spike(100))
    [f] = gate.release()
    assert f.severity is Severity.WARNING and f.evidence["run_kept_learning"] is False
    assert float(f.evidence["loss_at_finding"]) > 10 * float(f.evidence["loss_before_finding"])
