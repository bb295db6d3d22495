"""Session 19: gradient clipping handed other parameters than the optimizer it precedes steps
(`_dynamics/_clipmiss.py`, `dynamics.clip_misses_optimizer`).

Written the ways users write it: a helper `minimize(module, optimizer, loss)` called with the
wrong module (the value head for the policy optimizer), a GAN whose generator step clips the
discriminator; and the look-alikes that stay quiet: actor-critic clipping each its own, a
shared trunk with only one head clipped, one clip over everything before two optimizers' steps,
a clip with an infinite max_norm used to measure a norm, a clip that would not have bitten."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from _lines import line_in
from torchtriage import Category, Severity
from torchtriage._session import Session

CODE = "dynamics.clip_misses_optimizer"


class ActorCritic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.torso = nn.Sequential(nn.Linear(6, 32), nn.ReLU())
        self.policy = nn.Linear(32, 4)
        self.value = nn.Linear(32, 1)


def _batch(g: torch.Generator):
    x = torch.randn(32, 6, generator=g)
    a = torch.randint(0, 4, (32,), generator=g)
    ret = x[:, 0] * 3 + torch.randn(32, generator=g)
    return x, a, ret


class Agent:
    def __init__(self, net: ActorCritic, clip_policy_with: str, max_norm: float = 0.1) -> None:
        self.net = net
        self.max_norm = max_norm
        self.critic_opt = torch.optim.SGD(list(net.torso.parameters()) + list(net.value.parameters()), lr=0.05)
        self.pi_opt = torch.optim.SGD(list(net.torso.parameters()) + list(net.policy.parameters()), lr=0.5)
        self.clip_policy_with = getattr(net, clip_policy_with)

    def minimize(self, module: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(module.parameters(), self.max_norm)  # <- helper-clip
        optimizer.step()

    def update(self, x, a, ret) -> None:
        h = self.net.torso(x)
        critic_loss = F.mse_loss(self.net.value(h).squeeze(1), ret)
        self.minimize(self.net.value, self.critic_opt, critic_loss)
        h = self.net.torso(x)
        logp = F.log_softmax(self.net.policy(h), dim=1).gather(1, a[:, None]).squeeze(1)
        adv = (ret - self.net.value(h).squeeze(1)).detach()
        pi_loss = -(logp * adv).mean()
        self.minimize(self.clip_policy_with, self.pi_opt, pi_loss)


def _train_agent(clip_policy_with: str, max_norm: float = 0.1):
    net = ActorCritic()
    agent = Agent(net, clip_policy_with, max_norm)
    g = torch.Generator().manual_seed(1)
    with Session(net, [agent.critic_opt, agent.pi_opt], on_anomaly="record", report=False, checks=["dynamics"]) as s:
        for _ in range(25):
            agent.update(*_batch(g))
    return s.report.filter(code=CODE)


def test_policy_update_clipping_the_value_head_is_a_warning():
    [f] = _train_agent("value")
    assert (f.severity, f.category, f.line) == (Severity.WARNING, Category.GRADIENT, line_in(__file__, "helper-clip"))
    ev = f.evidence
    assert ev["steps_clip_missed"] == ev["steps_after_a_clip"] >= 10  # (the sampled steps)
    assert ev["steps_norm_above_max_norm"] == ev["steps_with_norm_read"] > 0
    assert ev["clipped_parameters"] == ["value.weight", "value.bias"]
    assert "torso.0.weight" in ev["stepped_parameters"]


def test_policy_update_clipping_its_own_head_is_quiet():
    assert _train_agent("policy") == []  # (the torso is shared and unclipped: one parameter in common is enough)


def test_a_clip_that_would_not_have_bitten_is_an_info():
    [f] = _train_agent("value", max_norm=1e4)
    assert f.severity is Severity.INFO
    assert f.evidence["steps_norm_above_max_norm"] == 0


def _gan(loop_clip: str):
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    disc = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-3)
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(2)
    with Session([gen, disc], [opt_g, opt_d], on_anomaly="record", report=False, checks=["dynamics"]) as s:
        for _ in range(25):
            real = torch.randn(64, 2, generator=g) * 0.5 + 2
            fake = gen(torch.randn(64, 4, generator=g))
            d_loss = F.softplus(disc(fake.detach())).mean() + F.softplus(-disc(real)).mean()
            opt_d.zero_grad()
            d_loss.backward()
            torch.nn.utils.clip_grad_norm_(disc.parameters(), 0.01)
            opt_d.step()
            g_loss = F.softplus(-disc(fake)).mean()
            opt_g.zero_grad()
            g_loss.backward()
            if loop_clip == "disc":
                torch.nn.utils.clip_grad_norm_(disc.parameters(), 0.01)  # <- gan-clip
            elif loop_clip == "both":
                torch.nn.utils.clip_grad_norm_([*gen.parameters(), *disc.parameters()], 0.01)
            elif loop_clip == "measure":
                torch.nn.utils.clip_grad_norm_(disc.parameters(), float("inf"))
            opt_g.step()
    return s.report.filter(code=CODE)


def test_generator_step_clipping_the_discriminator_is_a_warning():
    [f] = _gan("disc")
    assert (f.severity, f.line) == (Severity.WARNING, line_in(__file__, "gan-clip"))
    assert f.evidence["optimizer"] == "Adam"


def test_generator_clipped_with_everything_and_a_norm_measurement_are_quiet():
    assert _gan("both") == []
    assert _gan("measure") == []


def test_one_clip_before_two_optimizers_steps_is_quiet():
    torch.manual_seed(0)
    enc, dec = nn.Linear(8, 4), nn.Linear(4, 8)
    opt_e, opt_d = torch.optim.SGD(enc.parameters(), lr=0.1), torch.optim.SGD(dec.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(3)
    with Session([enc, dec], [opt_e, opt_d], on_anomaly="record", report=False, checks=["dynamics"]) as s:
        for _ in range(20):
            x = torch.randn(16, 8, generator=g) * 10
            loss = F.mse_loss(dec(enc(x)), x)
            opt_e.zero_grad()
            opt_d.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(list(enc.parameters()) + list(dec.parameters()), 0.5)
            opt_e.step()
            opt_d.step()
    assert s.report.filter(code=CODE) == []
