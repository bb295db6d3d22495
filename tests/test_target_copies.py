"""Copies that must follow their trained model (RL target networks): `silent.target_copy_frozen`
(one copy never updated while a sibling copy is) and `silent.target_copy_unsynced` (a copy
soft-updated toward a model it was never copied from). Agents written the way users write
them; correct look-alikes (both targets updated, a hard copy every N steps, a frozen reference
policy, a fixed random target network) stay quiet."""

from __future__ import annotations

import copy
import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


class Actor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2), nn.Tanh())

    def forward(self, s):
        return self.net(s)


class Critic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, s, a):
        return self.net(torch.cat([s, a], 1))


def soft_update(target, online, tau):
    with torch.no_grad():
        for t, p in zip(target.parameters(), online.parameters()):
            t.mul_(1 - tau).add_(p, alpha=tau)


class DDPG:
    def __init__(self, sync_actor=True, update_actor_target=True, tau=0.05, hard_every=0):
        torch.manual_seed(0)
        self.actor, self.critic = Actor(), Critic()
        self.critic_target = copy.deepcopy(self.critic)
        self.actor_target = copy.deepcopy(self.actor) if sync_actor else Actor()
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=3e-3)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=3e-3)
        self.update_actor_target, self.tau, self.hard_every = update_actor_target, tau, hard_every

    def learn(self, s, a, r, s2, done, step):
        with torch.no_grad():
            a2 = self.actor_target(s2)  # <- target used
            y = r + 0.99 * (1 - done) * self.critic_target(s2, a2)
        critic_loss = F.mse_loss(self.critic(s, a), y)
        self.critic_opt.zero_grad()
        critic_loss.backward()
        self.critic_opt.step()
        actor_loss = -self.critic(s, self.actor(s)).mean()
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()
        soft_update(self.critic_target, self.critic, self.tau)
        if self.hard_every and step % self.hard_every == 0:
            self.actor_target.load_state_dict(self.actor.state_dict())
        elif self.update_actor_target and not self.hard_every:
            soft_update(self.actor_target, self.actor, self.tau)


def batches(steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        s = torch.randn(64, 4, generator=g)
        a = torch.rand(64, 2, generator=g) * 2 - 1
        r = -(s[:, :2] - a).pow(2).sum(1, keepdim=True)
        yield step, s, a, r, s + 0.1 * torch.randn(64, 4, generator=g), (torch.rand(64, 1, generator=g) < 0.05).float()


def run(agent, steps=60):
    with torchtriage.watch([agent.actor, agent.critic], [agent.critic_opt, agent.actor_opt],
                           on_anomaly="record", report=False) as s:
        for step, st, a, r, s2, done in batches(steps):
            agent.learn(st, a, r, s2, done, step)
    return s.report


def target_codes(report) -> list[str]:
    return [f.code for f in report.findings if f.code.startswith("silent.target_copy")]


# ---------------------------------------------------------------- silent.target_copy_frozen
def test_target_actor_never_soft_updated_is_reported_at_its_use():
    report = run(DDPG(update_actor_target=False))
    [f] = report.filter(code="silent.target_copy_frozen")
    assert (f.category.value, f.severity, f.line) == ("silent", Severity.WARNING, line("target used"))
    ev = f.evidence
    assert (ev["copy"], ev["model"]) == ("self.actor_target", "self.actor")
    assert (ev["sibling_copy"], ev["sibling_model"]) == ("self.critic_target", "self.critic")
    assert float(ev["distance_last"]) > 2 * float(ev["distance_first"])
    assert abs(ev["sibling_update_coefficient_median"] - 0.05) < 1e-3
    assert target_codes(report) == ["silent.target_copy_frozen"]


class TD3Targets:
    """A variant: twin critics in one optimizer, targets in a list, the update through
    torch._foreach_lerp_ over a list that forgot the second critic."""

    def __init__(self, forget: bool):
        torch.manual_seed(0)
        self.q1, self.q2 = Critic(), Critic()
        self.t1, self.t2 = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
        self.opt = torch.optim.Adam([*self.q1.parameters(), *self.q2.parameters()], lr=3e-3)
        pairs = [(self.t1, self.q1)] if forget else [(self.t1, self.q1), (self.t2, self.q2)]
        self.targets = [t for t, _ in pairs]
        self.onlines = [q for _, q in pairs]

    def step(self, s, a, r, s2, done):
        with torch.no_grad():
            q_next = torch.min(self.t1(s2, a), self.t2(s2, a))  # <- twin targets
            y = r + 0.99 * (1 - done) * q_next
        loss = F.mse_loss(self.q1(s, a), y) + F.mse_loss(self.q2(s, a), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        with torch.no_grad():
            tp = [p for t in self.targets for p in t.parameters()]
            op = [p for q in self.onlines for p in q.parameters()]
            torch._foreach_lerp_(tp, op, 0.02)


def run_td3(agent, steps=60):
    with torchtriage.watch([agent.q1, agent.q2], agent.opt, on_anomaly="record", report=False) as s:
        for _, st, a, r, s2, done in batches(steps):
            agent.step(st, a, r, s2, done)
    return s.report


def test_one_of_two_critic_targets_forgotten_in_a_foreach_update():
    report = run_td3(TD3Targets(forget=True))
    [f] = report.filter(code="silent.target_copy_frozen")
    assert (f.severity, f.line) == (Severity.WARNING, line("twin targets"))
    assert (f.evidence["copy"], f.evidence["model"]) == ("self.t2", "self.q2")


def test_both_critic_targets_updated_is_quiet():
    assert target_codes(run_td3(TD3Targets(forget=False))) == []


# ---------------------------------------------------------------- silent.target_copy_unsynced
def test_target_actor_built_beside_the_actor_and_never_copied():
    report = run(DDPG(sync_actor=False))
    [f] = report.filter(code="silent.target_copy_unsynced")
    assert (f.category.value, f.severity, f.line) == ("silent", Severity.WARNING, line("target used"))
    ev = f.evidence
    assert (ev["copy"], ev["model"], ev["sibling_copy"]) == ("self.actor_target", "self.actor", "self.critic_target")
    assert float(ev["relative_distance"]) > 0.5
    assert abs(ev["update_coefficient_median"] - 0.05) < 5e-3
    assert target_codes(report) == ["silent.target_copy_unsynced"]


# ---------------------------------------------------------------- quiet look-alikes
def test_both_targets_soft_updated_is_quiet():
    assert target_codes(run(DDPG())) == []


def test_actor_target_hard_copied_every_few_steps_is_quiet():
    # between the readings the copy moves only at its hard update: it is not frozen
    assert target_codes(run(DDPG(hard_every=7))) == []


def test_frozen_reference_policy_without_a_followed_copy_is_quiet():
    torch.manual_seed(0)
    policy = Actor()
    reference = copy.deepcopy(policy).requires_grad_(False)  # a KL anchor, never meant to move
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    with torchtriage.watch(policy, opt, on_anomaly="record", report=False) as s:
        for _, st, a, _, _, _ in batches(60):
            out = policy(st)
            with torch.no_grad():
                ref = reference(st)
            loss = F.mse_loss(out, a) + 0.1 * F.mse_loss(out, ref)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert target_codes(s.report) == []


def test_fixed_random_target_network_beside_a_soft_updated_one_is_quiet():
    # random network distillation: the target is a fixed random twin of the predictor, by design
    agent = DDPG()
    torch.manual_seed(5)
    predictor, rnd_target = Actor(), Actor()
    opt = torch.optim.Adam(predictor.parameters(), lr=1e-3)
    with torchtriage.watch([agent.actor, agent.critic, predictor], [agent.critic_opt, agent.actor_opt, opt],
                           on_anomaly="record", report=False) as s:
        for step, st, a, r, s2, done in batches(60):
            with torch.no_grad():
                goal = rnd_target(s2)
            bonus = F.mse_loss(predictor(s2), goal)
            opt.zero_grad()
            bonus.backward()
            opt.step()
            agent.learn(st, a, r, s2, done, step)
    assert target_codes(s.report) == []
