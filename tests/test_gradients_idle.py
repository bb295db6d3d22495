"""An optimizer that never steps while its parameters get gradients (`gradient.optimizer_idle`):
the seq2seq loop with one optimizer per model and `encoder_optimizer.step()` forgotten is an
error naming the optimizer, its model and the line that built it; an optimizer that steps late
(a generator after its discriminator's warm-up), one whose parameters another optimizer updates,
and one whose parameters get no gradient stay quiet."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import line_in
from torchtriage import Severity

HERE = Path(__file__)
V, H = 12, 16


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, H)
        self.gru = nn.GRU(H, H, batch_first=True)

    def forward(self, x):
        return self.gru(self.emb(x))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, H)
        self.gru = nn.GRU(H, H, batch_first=True)
        self.out = nn.Linear(H, V)

    def forward(self, y, h):
        o, h = self.gru(F.relu(self.emb(y)), h)
        return F.log_softmax(self.out(o), -1), h


def _translate(step_encoder: bool):
    torch.manual_seed(0)
    encoder, decoder = Encoder(), Decoder()
    encoder_optimizer = torch.optim.SGD(encoder.parameters(), lr=0.01)  # ENCODER-OPT
    decoder_optimizer = torch.optim.SGD(decoder.parameters(), lr=0.01)
    criterion = nn.NLLLoss()
    with torchtriage.watch([encoder, decoder], [encoder_optimizer, decoder_optimizer],
                           on_anomaly="record", report=False) as s:
        for _ in range(6):
            src, tgt = torch.randint(0, V, (4, 7)), torch.randint(0, V, (4, 5))
            encoder_optimizer.zero_grad()
            decoder_optimizer.zero_grad()
            _, h = encoder(src)
            inp, loss = torch.zeros(4, 1, dtype=torch.long), 0
            for t in range(tgt.shape[1]):
                out, h = decoder(inp, h)
                loss += criterion(out.squeeze(1), tgt[:, t])
                inp = tgt[:, t:t + 1]  # teacher forcing
            loss.backward()
            if step_encoder:
                encoder_optimizer.step()
            decoder_optimizer.step()
    return s.report


def _loud(report):
    return [f for f in report.findings if f.severity is not Severity.INFO]


def _line(marker):
    return line_in(HERE, marker, ending=True)


def test_an_encoder_optimizer_that_never_steps_is_an_error_at_its_line():
    (f,) = _loud(_translate(step_encoder=False))
    assert (f.code, f.severity, f.op, f.file, f.line) == ("gradient.optimizer_idle", Severity.ERROR, "SGD", str(HERE),
                                                         _line("# ENCODER-OPT"))
    assert (f.evidence["optimizer"], f.evidence["model"], f.evidence["parameters"]) == (0, "encoder", 5)
    assert f.message.startswith("optimizer 0 (SGD) of encoder never stepped in 6 optimizer steps: its 5 parameters")


def test_the_same_loop_with_both_optimizers_stepping_is_quiet():
    assert _loud(_translate(step_encoder=True)) == []


def test_a_generator_that_steps_after_a_warm_up_is_quiet():
    """D trains alone for 14 steps on G's undetached output (G's parameters get gradients),
    then G steps too: the window sees G idle, the held verdict is dropped when it steps."""
    torch.manual_seed(0)
    G, D = nn.Linear(4, 6), nn.Sequential(nn.Linear(6, 1))
    opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
    opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
    with torchtriage.watch([D, G], [opt_d, opt_g], on_anomaly="record", report=False) as s:
        for i in range(20):
            real, z = torch.randn(8, 6), torch.randn(8, 4)
            opt_d.zero_grad()
            opt_g.zero_grad()
            d_loss = F.softplus(-D(real)).mean() + F.softplus(D(G(z))).mean()
            d_loss.backward()
            opt_d.step()
            if i >= 14:
                opt_g.zero_grad()
                g_loss = F.softplus(-D(G(z))).mean()
                g_loss.backward()
                opt_g.step()
    assert [f.code for f in _loud(s.report)] == []


def test_idle_optimizers_whose_parameters_are_updated_elsewhere_or_get_no_gradient_are_quiet():
    torch.manual_seed(0)
    body, head = nn.Linear(4, 8), nn.Linear(8, 2)
    model = nn.Sequential(body, nn.ReLU(), head)
    for p in head.parameters():
        p.requires_grad_(False)  # phase 1: the head is frozen
    opt = torch.optim.SGD(body.parameters(), lr=0.1)
    spare = torch.optim.SGD(body.parameters(), lr=0.01)  # the same parameters, stepped by `opt`
    phase2 = torch.optim.SGD(head.parameters(), lr=0.01)  # for a later phase: no gradient yet
    with torchtriage.watch(model, [opt, spare, phase2], on_anomaly="record", report=False) as s:
        for _ in range(6):
            loss = F.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 2, (8,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert [f.code for f in _loud(s.report)] == []
