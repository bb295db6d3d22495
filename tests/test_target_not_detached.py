"""Session 19: a regression target computed with grad from the parameters being trained
(`_silent/_livetarget.py`, `silent.target_not_detached`).

Written the ways users write TD learning: a double-DQN whose bootstrap value comes from the online
network without `.detach()`, a TD(0) state-value learner with `smooth_l1_loss` whose next value is
not detached (a variant with a critic module and a done mask); the look-alikes that stay quiet: a
target network, a detached target, a target under `no_grad`; and a consistency loss between two
views of one model (both sides trained on purpose in some methods): an info."""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from _lines import line_in
from torchtriage import Category, Severity
from torchtriage._session import Session

CODE = "silent.target_not_detached"


def qnet() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3))


def transitions(g: torch.Generator, n: int = 32):
    s = torch.randn(n, 6, generator=g)
    a = torch.randint(0, 3, (n, 1), generator=g)
    r = torch.rand(n, 1, generator=g)
    s2 = torch.randn(n, 6, generator=g)
    done = (torch.rand(n, 1, generator=g) < 0.1).float()
    return s, a, r, s2, done


def dqn(style: str, steps: int = 12):
    online = qnet()
    target_net = copy.deepcopy(online)
    opt = torch.optim.Adam(online.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    with Session(online, opt, on_anomaly="record", report=False) as s:
        for _ in range(steps):
            states, actions, rewards, next_states, dones = transitions(g)
            best = target_net(next_states).argmax(dim=1, keepdim=True)
            if style == "double_online":
                q_next = online(next_states).gather(1, best)
            elif style == "double_detached":
                q_next = online(next_states).gather(1, best).detach()
            elif style == "no_grad":
                with torch.no_grad():
                    q_next = online(next_states).max(1, keepdim=True)[0]
            else:  # a target network (its parameters are in no optimizer)
                q_next = target_net(next_states).max(1, keepdim=True)[0]
            y = rewards + 0.99 * q_next * (1 - dones)
            q = online(states).gather(1, actions)
            loss = nn.MSELoss()(q, y)  # <- dqn-loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report.filter(code=CODE)


def test_double_dqn_target_from_the_online_network_is_a_warning():
    [f] = dqn("double_online")
    assert (f.severity, f.category, f.line) == (Severity.WARNING, Category.GRADIENT, line_in(__file__, "dqn-loss"))
    ev = f.evidence
    assert ev["bootstrap_form_calls"] == ev["calls_with_shared_parameters"] >= 3
    assert ev["calls_target_received_gradient"] == ev["calls_gradient_read"] > 0
    assert "0.weight" in " ".join(ev["examples"])


def test_detached_no_grad_and_target_network_targets_are_quiet():
    assert dqn("double_detached") == []
    assert dqn("no_grad") == []
    assert dqn("target_network") == []


class Critic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(4, 32), nn.Tanh())
        self.v = nn.Linear(32, 1)

    def forward(self, s):
        return self.v(self.body(s)).squeeze(-1)


def test_td0_value_target_not_detached_is_a_warning():
    critic = Critic()
    opt = torch.optim.SGD(critic.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(2)
    with Session(critic, opt, on_anomaly="record", report=False) as s:
        for _ in range(10):
            s0, s1 = torch.randn(64, 4, generator=g), torch.randn(64, 4, generator=g)
            reward, not_done = torch.randn(64, generator=g), (torch.rand(64, generator=g) > 0.05).float()
            td_target = reward + 0.9 * not_done * critic(s1)
            value_loss = F.smooth_l1_loss(critic(s0), td_target)  # <- value-td-loss
            opt.zero_grad()
            value_loss.backward()
            opt.step()
    [f] = s.report.filter(code=CODE)
    assert (f.severity, f.line) == (Severity.WARNING, line_in(__file__, "value-td-loss"))
    assert f.evidence["loss"] == "smooth_l1_loss"


def test_a_consistency_loss_between_two_views_is_an_info():
    net = qnet()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(3)
    with Session(net, opt, on_anomaly="record", report=False) as s:
        for _ in range(8):
            x = torch.randn(32, 6, generator=g)
            a, b = net(x + 0.1 * torch.randn_like(x)), net(x + 0.1 * torch.randn_like(x))
            loss = F.mse_loss(a, b)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert [f.severity for f in s.report.filter(code=CODE)] == [Severity.INFO]
