"""`gradient.backward_twice` names the tensor whose graph an earlier backward() freed, read from
the autograd graph (node numbers and freed saved tensors), matched to the user's variables and
the step's record: a GAN's generator output reused by the D step, a hidden state carried across
steps, the same loss backpropagated twice."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import marked

HERE = Path(__file__)


line_of = marked(HERE)


def _gan():
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6), nn.Tanh())
    D = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
    return G, D, torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())


def gan_steps(G, D, opt_g, opt_d, detach, steps=2):
    for _ in range(steps):
        real = torch.randn(8, 6)
        ones, zeros = torch.ones(8, 1), torch.zeros(8, 1)
        opt_g.zero_grad()
        fake = G(torch.randn(8, 4))  # fake made
        g_loss = F.binary_cross_entropy_with_logits(D(fake), ones)
        g_loss.backward()
        opt_g.step()
        opt_d.zero_grad()
        real_loss = F.binary_cross_entropy_with_logits(D(real), ones)
        fake_loss = F.binary_cross_entropy_with_logits(D(fake.detach() if detach else fake), zeros)  # fake enters
        d_loss = (real_loss + fake_loss) / 2
        d_loss.backward()  # d backward
        opt_d.step()


def test_gan_discriminator_step_on_the_generators_output_names_it():
    G, D, opt_g, opt_d = _gan()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        with torchtriage.watch([G, D], [opt_g, opt_d], on_anomaly="record", report=False) as s:
            gan_steps(G, D, opt_g, opt_d, detach=False)
    (f,) = [f for f in s.report if f.code == "gradient.backward_twice"]
    assert (f.file, f.line) == (str(HERE), line_of("d backward"))
    assert f.message == "backward through a graph whose saved tensors were already freed (through fake)"
    assert f.cause == (
        "a second backward() reuses a graph from an earlier one: fake (made at test_triage_freed.py:"
        f"{line_of('fake made')} fake = G(torch.randn(8, 4))  # fake made) belongs to a graph that an earlier "
        "backward() already ran through and freed; it enters this backward's graph at test_triage_freed.py:"
        f"{line_of('fake enters')}")
    assert f.next_check.startswith("use fake.detach() where it is reused")
    assert f.evidence["reused"] == "fake"


def test_gan_with_the_output_detached_is_quiet():
    G, D, opt_g, opt_d = _gan()
    with torchtriage.watch([G, D], [opt_g, opt_d], on_anomaly="record", report=False) as s:
        gan_steps(G, D, opt_g, opt_d, detach=True)
    assert [f for f in s.report if f.severity.value != "info"] == []


def test_outside_a_session_the_earlier_backwards_graph_dates_the_reuse():
    """`triage_exception` on a caught error: no session saw the backward calls; the freed graph
    the failing backward does not reach (g_loss's) tells which nodes are older than it."""
    G, D, opt_g, opt_d = _gan()
    with pytest.raises(RuntimeError) as info:
        gan_steps(G, D, opt_g, opt_d, detach=False)
    (f,) = torchtriage.triage_exception(info.value).findings
    assert f.code == "gradient.backward_twice"
    assert f.message.endswith("(through fake)") and f.evidence["reused"] == "fake"


def test_a_hidden_state_carried_across_steps_is_named_where_it_is_carried():
    torch.manual_seed(0)
    cell = nn.Linear(8, 16)
    opt = torch.optim.SGD(cell.parameters(), lr=0.1)
    with pytest.raises(RuntimeError):
        with torchtriage.watch(cell, opt, on_anomaly="record", report=False) as s:
            h = torch.zeros(2, 16)
            for _ in range(2):
                h = torch.tanh(cell(torch.randn(2, 8)) + h[:, :16] * 0.5)  # h carried
                loss = h.pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    (f,) = [f for f in s.report if f.code == "gradient.backward_twice"]
    assert f.message.endswith("(through h)")
    assert f.cause == ("a second backward() reuses a graph from an earlier one: h, carried from one step to the "
                       f"next at test_triage_freed.py:{line_of('h carried')}, still holds the graph of an earlier "
                       "step, which that step's backward() freed (a hidden state not detached)")
    assert f.next_check.startswith("detach it where it is carried (h = h.detach() before the next step")


def test_the_same_loss_backpropagated_twice_is_named_as_such():
    net = nn.Linear(4, 1)
    with pytest.raises(RuntimeError):
        with torchtriage.watch(net, on_anomaly="record", report=False) as s:
            loss = net(torch.randn(3, 4)).pow(2).mean()
            loss.backward()
            loss.backward()
    (f,) = [f for f in s.report if f.code == "gradient.backward_twice"]
    assert f.cause.startswith("a second backward() reuses a graph from an earlier one: loss (made at ")
    assert f.cause.endswith("was already backpropagated by an earlier backward(), which freed its graph")
    assert f.next_check.startswith("call backward() once per loss")


def test_a_message_without_a_traceback_keeps_the_generic_reading():
    exc = RuntimeError("Trying to backward through the graph a second time (or directly access saved tensors "
                       "after they have already been freed).")
    (f,) = torchtriage.triage_exception(exc).findings
    assert f.message == "backward through a graph whose saved tensors were already freed"
    assert f.cause == ("a second backward() reuses a graph from an earlier one (a tensor kept across steps, "
                       "e.g. a hidden state)")
    assert "reused" not in f.evidence
