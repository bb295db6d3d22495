"""A state carried across steps with its graph, kept alive by retain_graph=True: each backward
runs through every earlier batch. Seen from the graph (old nodes reached by one backward line,
growing from call to call) and named where the old graph enters the step."""

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


class LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.rnn = nn.LSTM(8, 8)
        self.head = nn.Linear(8, 20)

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.embed(x), hidden)
        return self.head(out).view(-1, 20), hidden


def _loud(report):
    return [f for f in report if f.severity is not Severity.INFO]


def lm_steps(detach: bool, steps: int = 4):
    torch.manual_seed(0)
    model = LM()
    data = torch.randint(0, 20, (steps * 3 + 1, 2))
    # the update of pytorch/examples' word_language_model: p.data, no optimizer
    with torchtriage.watch(model, on_anomaly="record", report=False) as s:
        hidden = (torch.zeros(1, 2, 8), torch.zeros(1, 2, 8))
        for i in range(0, steps * 3, 3):
            x, y = data[i:i + 3], data[i + 1:i + 4].reshape(-1)
            if detach:
                hidden = tuple(h.detach() for h in hidden)
            out, hidden = model(x, hidden)  # hidden enters
            loss = F.cross_entropy(out, y)
            model.zero_grad()
            loss.backward(retain_graph=True)  # lm backward
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-0.1)
    return _loud(s.report)


def test_a_hidden_state_carried_with_retain_graph_is_named_where_it_enters():
    (f,) = lm_steps(detach=False)
    assert (f.code, f.severity, f.step) == ("silent.loss_graph_kept", Severity.WARNING, 2)
    assert (f.file, f.line) == (HERE, line_of("hidden enters"))
    assert f.message.startswith("hidden, carried from one step to the next with its autograd graph")
    assert f.next_check.startswith("detach hidden between steps (hidden = hidden.detach()")
    before, now = f.evidence["old_nodes_reached"]
    assert 0 < before < now
    assert f.evidence["backward_line"] == f"{HERE}:{line_of('lm backward')}"


def test_the_same_loop_with_the_state_detached_is_quiet():
    assert lm_steps(detach=True) == []


def test_a_fixed_graph_reused_every_step_is_not_growth():
    """A table computed once before the loop and reused with retain_graph=True on purpose: every
    backward reaches the same old nodes, their number does not grow."""
    torch.manual_seed(0)
    base = nn.Parameter(torch.randn(6, 4))
    head = nn.Linear(4, 1)
    opt = torch.optim.SGD([base, *head.parameters()], lr=0.01)
    with torchtriage.watch(head, opt, on_anomaly="record", report=False) as s:
        table = torch.tanh(base) * 2  # once, with its graph
        for _ in range(4):
            idx = torch.randint(0, 6, (3,))
            loss = head(table[idx]).pow(2).mean()
            opt.zero_grad()
            loss.backward(retain_graph=True)
            opt.step()
    assert _loud(s.report) == []


class Stateful(nn.Module):
    """Keeps its own state between calls: the old graph enters inside the model."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.Linear(8, 8)
        self.state = torch.zeros(2, 8)

    def forward(self, x):
        self.state = torch.tanh(self.cell(x) + self.state)
        return self.state


def test_a_state_kept_inside_the_model_names_the_backward_line():
    torch.manual_seed(0)
    model = Stateful()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            loss = model(torch.randn(2, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward(retain_graph=True)  # stateful backward
            opt.step()
    (f,) = _loud(s.report)
    assert (f.code, f.severity) == ("silent.loss_graph_kept", Severity.WARNING)
    assert (f.file, f.line) == (HERE, line_of("stateful backward"))
    assert f.message.startswith("a tensor carried from one step to the next with its autograd graph")


def test_one_backward_helper_for_the_losses_of_one_forward_is_not_growth():
    """`manual_backward(loss)` (one line) runs two adversaries' losses with retain_graph=True, each
    followed by its optimizer's step, then the main loss of the same forward: each call reaches
    the forward made before the previous call's roots, within one iteration, more nodes each time.
    Each caller's line makes its own site, and nothing of an earlier iteration is reached."""
    torch.manual_seed(0)
    enc1, enc2, dec = nn.Linear(8, 6), nn.Linear(6, 4), nn.Linear(4, 8)
    advs = [nn.Sequential(nn.Linear(6, 1), nn.Sigmoid()), nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())]
    opt = torch.optim.Adam([p for m in (enc1, enc2, dec) for p in m.parameters()], lr=1e-3)
    opt_advs = [torch.optim.Adam(a.parameters(), lr=1e-3) for a in advs]

    def manual_backward(loss, retain_graph=False):
        loss.backward(retain_graph=retain_graph)

    with torchtriage.watch([enc1, enc2, dec, *advs], [*opt_advs, opt], on_anomaly="record", report=False) as s:
        for _ in range(6):
            x = torch.randn(16, 8)
            for o in (opt, *opt_advs):
                o.zero_grad()
            h1 = torch.relu(enc1(x))
            h2 = torch.relu(enc2(h1))
            recon = F.mse_loss(dec(h2), x)  # (made before the adversaries' backward calls)
            for h, adv, o in zip((h1, h2), advs, opt_advs):
                manual_backward(F.binary_cross_entropy(adv(h), torch.zeros(16, 1)), retain_graph=True)
                o.step()
            trick = sum(F.binary_cross_entropy(adv(h), torch.ones(16, 1)) for h, adv in zip((h1, h2), advs))
            manual_backward(recon + 0.1 * trick)
            opt.step()
    assert s.report.filter(code="silent.loss_graph_kept") == []
