"""A baseline trained by the policy loss (session 12): the advantage in a REINFORCE / actor-critic
term is not detached, so the policy's loss reaches the critic. Written three ways (separate actor
and critic with one optimizer, a shared trunk with a value head, a Gaussian policy with learned
scale and a function-based update); the correct twins (detached advantage, entropy bonus, shared
trunk with a combined loss) stay quiet."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributions as D
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import marked
from torchtriage import Severity

HERE = str(Path(__file__))


line_of = marked(Path(HERE))


def found(report):
    return [f for f in report if f.code == "gradient.baseline_not_detached"]


def separate(detach, steps=6):
    torch.manual_seed(0)
    actor = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))
    critic = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.Adam(list(actor.parameters()) + list(critic.parameters()), lr=1e-3)
    with torchtriage.watch([actor, critic], opt, on_anomaly="record", report=False) as s:
        for _ in range(steps):
            obs = torch.randn(32, 4)
            dist = D.Categorical(logits=actor(obs))
            act = dist.sample()
            reward = (act == 1).float()
            value = critic(obs).squeeze(-1)
            baseline = value.detach() if detach else value
            policy_loss = -((reward - baseline) * dist.log_prob(act)).mean()
            loss = policy_loss + F.mse_loss(value, reward) - 0.01 * dist.entropy().mean()
            opt.zero_grad()
            loss.backward()  # BACKWARD-SEP
            opt.step()
    return s.report


def test_a_critic_not_detached_in_the_policy_loss_is_named():
    [f] = found(separate(detach=False))
    assert f.severity is Severity.WARNING and f.line == line_of("BACKWARD-SEP")
    ev = f.evidence
    assert ev["parameters_reached_through_the_weight"] == ["critic.0.weight", "critic.0.bias", "critic.2.weight",
                                                           "critic.2.bias"]
    assert ev["count"] == 4 and ev["values"] == 4 * 16 + 16 + 16 + 1


def test_a_detached_baseline_with_an_entropy_bonus_is_quiet():
    assert not found(separate(detach=True))


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(6, 32), nn.ReLU())
        self.pi = nn.Linear(32, 4)
        self.v = nn.Linear(32, 1)

    def forward(self, x):
        h = self.trunk(x)
        return F.log_softmax(self.pi(h), -1), self.v(h).squeeze(-1)


def shared(detach, steps=6):
    torch.manual_seed(0)
    net = ActorCritic()
    opt = torch.optim.RMSprop(net.parameters(), lr=7e-4)
    with torchtriage.watch(net, opt, on_anomaly="record", report=False) as s:
        for _ in range(steps):
            logp, values = net(torch.randn(16, 6))
            actions = torch.randint(0, 4, (16,))
            returns = torch.randn(16)
            advantages = returns - values
            adv = advantages.detach() if detach else advantages
            actor_loss = -(logp.gather(1, actions[:, None]).squeeze(1) * adv).mean()
            critic_loss = advantages.pow(2).mean()
            opt.zero_grad()
            (actor_loss + 0.5 * critic_loss).backward()  # BACKWARD-A2C
            opt.step()
    return s.report


def test_a_shared_trunk_whose_advantage_is_not_detached_names_the_value_head():
    [f] = found(shared(detach=False))
    assert f.line == line_of("BACKWARD-A2C")
    assert f.evidence["parameters_reached_through_the_weight"] == ["v.weight", "v.bias"]
    assert f.evidence["log_probability_op"] == "LogSoftmax"


def test_a_shared_trunk_with_a_combined_loss_and_a_detached_advantage_is_quiet():
    assert not found(shared(detach=True))


def update(policy, log_std, value_fn, opt, obs, act, ret):
    dist = D.Normal(policy(obs), log_std.exp())
    logp = dist.log_prob(act).sum(-1)
    v = value_fn(obs).squeeze(-1)
    loss = -(logp * (ret - v)).mean() + (ret - v).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # BACKWARD-GAUSS
    opt.step()


def test_a_gaussian_policy_updated_by_a_function_is_named():
    torch.manual_seed(0)
    policy, value_fn = nn.Linear(3, 2), nn.Linear(3, 1)
    log_std = nn.Parameter(torch.zeros(2))
    opt = torch.optim.Adam([*policy.parameters(), log_std, *value_fn.parameters()], lr=1e-3)
    with torchtriage.watch([policy, value_fn], opt, on_anomaly="record", report=False) as s:
        for _ in range(6):
            update(policy, log_std, value_fn, opt, torch.randn(8, 3), torch.randn(8, 2), torch.randn(8))
    [f] = found(s.report)
    assert f.line == line_of("BACKWARD-GAUSS") and f.evidence["count"] == 2
    assert f.evidence["log_probability_op"] == "Log"


def test_a_focal_weight_from_the_same_logits_is_quiet():
    torch.manual_seed(0)
    model = nn.Linear(5, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(6):
            logp = F.log_softmax(model(torch.randn(8, 5)), -1)
            y = torch.randint(0, 3, (8,))
            lp = logp.gather(1, y[:, None]).squeeze(1)
            loss = -((1.0 - lp.exp()) * lp).mean() - ((lp.exp() - 0.5) * lp).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not found(s.report)
