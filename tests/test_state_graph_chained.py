"""A recurrent state carried with its autograd graph from one batch's forward to the next with no
backward between (`silent.loss_graph_kept`, variant state), written as users write it: an
evaluation loop without torch.no_grad() over a model that keeps its LSTM state on itself, and one
that passes the state back in. The look-alikes stay quiet: the same loops under no_grad, a fresh
state per batch, and a decoder stepping through one sequence token by token in training."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Category, Severity

HERE = str(Path(__file__))


def line_of(marker: str) -> int:
    lines = Path(HERE).read_text(encoding="utf-8").splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"# {marker}"))


class Keeps(nn.Module):
    """Stores the LSTM's returned state on itself and feeds it to the next call."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(6, 12, batch_first=True)
        self.head = nn.Linear(12, 2)
        self.state = None

    def reset(self, b: int) -> None:
        self.state = (torch.zeros(1, b, 12), torch.zeros(1, b, 12))

    def forward(self, x):
        out, self.state = self.lstm(x, self.state)
        return self.head(out[:, -1])


class Passes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(6, 12, batch_first=True)
        self.head = nn.Linear(12, 2)

    def forward(self, x, h):
        out, h = self.gru(x, h)
        return self.head(out[:, -1]), h


def batches(g: torch.Generator, n: int):
    for _ in range(n):
        yield torch.randn(8, 10, 6, generator=g), torch.randint(0, 2, (8,), generator=g)


def run_keeps(no_grad: bool, fresh: bool = False):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Keeps()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for x, y in batches(g, 3):
            model.reset(8)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        model.reset(8)
        correct = 0
        with torch.no_grad() if no_grad else torch.enable_grad():
            for x, y in batches(g, 12):
                if fresh:
                    model.reset(8)
                correct += int((model(x).argmax(1) == y).sum())  # evaluation call
    return s.report


def run_passes(no_grad: bool):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Passes()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for x, y in batches(g, 3):
            out, _ = model(x, torch.zeros(1, 8, 12))
            loss = F.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        h = torch.zeros(1, 8, 12)
        with torch.no_grad() if no_grad else torch.enable_grad():
            for x, _y in batches(g, 12):
                out, h = model(x, h)  # stream call
    return s.report


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(12, 8)
        self.cell = nn.GRU(8, 16)
        self.out = nn.Linear(16, 12)

    def forward(self, tok, h):
        out, h = self.cell(self.embed(tok), h)
        return self.out(out[0]), h


def run_decoder():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Decoder()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            target = torch.randint(0, 12, (14, 8), generator=g)
            h = torch.zeros(1, 8, 16)
            tok = torch.zeros(1, 8, dtype=torch.long)
            loss = 0
            for t in range(14):  # one sequence, token by token: the state is meant to carry
                logits, h = model(tok, h)
                loss = loss + F.cross_entropy(logits, target[t])
                tok = target[t].view(1, -1)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


def chained(report):
    return [f for f in report if f.code == "silent.loss_graph_kept" and "carried from one forward call" in f.message]


def test_state_kept_on_the_model_in_an_evaluation_without_no_grad():
    (f,) = chained(run_keeps(no_grad=False))
    assert f.severity is Severity.WARNING and f.category is Category.MEMORY
    assert f.line == line_of("evaluation call")
    assert f.evidence["calls_chained"] == 8 and f.evidence["state"] == ["state"]
    assert f.message.startswith("model.state is carried from one forward call to the next with its autograd graph")


def test_state_passed_back_in_is_found_too():
    (f,) = chained(run_passes(no_grad=False))
    assert f.line == line_of("stream call") and f.evidence["state"] is None


def test_look_alikes_are_quiet():
    assert chained(run_keeps(no_grad=True)) == []
    assert chained(run_keeps(no_grad=False, fresh=True)) == []
    assert chained(run_passes(no_grad=True)) == []
    assert chained(run_decoder()) == []
