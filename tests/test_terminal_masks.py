"""Session 13 (sil): bootstrapped targets and recursive returns that cross episode ends
(`_silent/_terminal.py`). Each bug is a small RL program written as users write it (a replay
DQN, a function-based TD(0) critic, an n-step class agent; GAE and discounted returns over
rollouts), run under a discovering session, with its exact finding; each correct look-alike
((1 - done), not_done, masks, `if done: gae = 0`, terminated vs truncated) is quiet."""

from __future__ import annotations

import textwrap

import pytest

from _lines import line_in
from test_ledger import run_script


def _run(tmp_path, source):
    return run_script("prog.py", tmp_path, checks=None, source=textwrap.dedent(source))[0]


def _line(source: str, tag: str = "# HERE") -> int:
    return line_in(source, tag, ending=True)


UNUSED = "silent.bootstrap_ignores_done"
CARRY = "silent.return_crosses_episode_end"


def _codes(report, *codes):
    return [f for f in report.findings if f.code in codes]


# ---------------------------------------------------------------- TD targets that ignore done
# (1) a replay-buffer DQN agent class, nn.MSELoss module, lists of numpy transitions
DQN_CLASS = """
    import random
    import numpy as np
    import torch
    import torch.nn as nn

    class Buffer:
        def __init__(self):
            self.items = []
        def push(self, *t):
            self.items.append(t)
        def sample(self, n):
            batch = random.sample(self.items, n)
            return [list(x) for x in zip(*batch)]

    class Agent:
        def __init__(self):
            self.q = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
            self.opt = torch.optim.Adam(self.q.parameters(), lr=1e-3)
            self.gamma = 0.99
            self.crit = nn.MSELoss()
        def loss(self, batch):
            obs, act, rew, obs2, term = batch
            obs = torch.tensor(np.array(obs), dtype=torch.float32)
            act = torch.tensor(act)
            rew = torch.tensor(rew, dtype=torch.float32)
            obs2 = torch.tensor(np.array(obs2), dtype=torch.float32)
            term = torch.tensor(term, dtype=torch.float32)
            q = self.q(obs).gather(1, act.unsqueeze(1)).squeeze(1)
            with torch.no_grad():
                nxt = self.q(obs2).max(1).values
            target = rew + self.gamma * nxt  # HERE
            return self.crit(q, target)

    random.seed(0); np.random.seed(0); torch.manual_seed(0)
    agent, buf = Agent(), Buffer()
    s = np.random.randn(4)
    for t in range(300):
        a = random.randrange(2)
        s2 = s + 0.1 * np.random.randn(4)
        done = float(abs(s2[0]) > 1.5 or t % 25 == 24)
        buf.push(s, a, 1.0, s2, done)
        s = np.random.randn(4) * 0.3 if done else s2
        if len(buf.items) >= 64:
            l = agent.loss(buf.sample(32))
            agent.opt.zero_grad(); l.backward(); agent.opt.step()
"""

# (2) a function-based TD(0) value critic on torch tensors, loss written by hand, dict-free tuple batch
TD_FUNCTION = """
    import torch
    import torch.nn as nn

    torch.manual_seed(1)
    critic = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(critic.parameters(), lr=0.01)
    N = 512
    S = torch.randn(N, 3); S2 = S + 0.1 * torch.randn(N, 3)
    R = torch.rand(N); D = (torch.rand(N) < 0.1).float(); W = torch.ones(N)

    def td_update(batch, gamma=0.95):
        s, r, s_next, d, w = batch
        v = critic(s).squeeze(-1)
        v_next = critic(s_next).squeeze(-1).detach()
        y = r + gamma * v_next  # HERE
        loss = (w * (v - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    for it in range(20):
        idx = torch.randint(0, N, (64,))
        td_update((S[idx], R[idx], S2[idx], D[idx], W[idx]))
"""

# (3) a double-DQN with a target network, smooth L1, bool dones from a dict-returning sampler
DDQN_TARGET = """
    import copy
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(2)
    online = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 3))
    target_net = copy.deepcopy(online)
    opt = torch.optim.RMSprop(online.parameters(), lr=1e-3)
    store = {"s": torch.randn(400, 6), "a": torch.randint(0, 3, (400,)), "r": torch.randn(400),
             "s2": torch.randn(400, 6), "done": torch.rand(400) < 0.05}

    def sample(n):
        i = torch.randint(0, 400, (n,))
        return store["s"][i], store["a"][i], store["r"][i], store["s2"][i], store["done"][i]

    def learn(gamma=0.9):
        states, actions, rewards, next_states, dones = sample(48)
        q = online(states).gather(1, actions[:, None]).squeeze(1)
        with torch.no_grad():
            best = online(next_states).argmax(1, keepdim=True)
            bootstrap = target_net(next_states).gather(1, best).squeeze(1)
        q_target = rewards + gamma * bootstrap  # HERE
        loss = F.smooth_l1_loss(q, q_target)
        opt.zero_grad(); loss.backward(); opt.step()

    for step in range(30):
        learn()
        if step % 10 == 0:
            target_net.load_state_dict(online.state_dict())
"""


@pytest.mark.parametrize("source", [DQN_CLASS, TD_FUNCTION, DDQN_TARGET], ids=["dqn_class", "td_function", "ddqn"])
def test_td_target_ignoring_done_is_found(tmp_path, source):
    report = _run(tmp_path, source)
    found = _codes(report, UNUSED)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    f = found[0]
    assert f.line == _line(source)
    assert f.severity.value == "warning"
    assert 0 < f.evidence["terminal_flags"] < f.evidence["transitions"]
    assert "never uses the replay batch's done flags" in f.message
    assert f.evidence["name"] in f.message


TD_FIXED = {
    "one_minus_done": DQN_CLASS.replace("target = rew + self.gamma * nxt  # HERE",
                                        "target = rew + self.gamma * nxt * (1 - term)"),
    "not_done": TD_FUNCTION.replace("y = r + gamma * v_next  # HERE", "not_done = 1 - d\n        "
                                    "y = r + gamma * not_done * v_next"),
    "bool_mask": DDQN_TARGET.replace("q_target = rewards + gamma * bootstrap  # HERE",
                                     "q_target = rewards + gamma * bootstrap * (~dones).float()"),
    "where": DDQN_TARGET.replace("q_target = rewards + gamma * bootstrap  # HERE",
                                 "q_target = torch.where(dones, rewards, rewards + gamma * bootstrap)"),
    # terminated used, truncated (time limits) left out on purpose
    "truncated_unused": DQN_CLASS.replace("obs, act, rew, obs2, term = batch",
                                          "obs, act, rew, obs2, term, trunc = batch").replace(
        "target = rew + self.gamma * nxt  # HERE", "target = rew + self.gamma * nxt * (1 - term)").replace(
        "buf.push(s, a, 1.0, s2, done)", "buf.push(s, a, 1.0, s2, float(abs(s2[0]) > 1.5), float(t % 25 == 24))"),
}


@pytest.mark.parametrize("source", list(TD_FIXED.values()), ids=list(TD_FIXED))
def test_td_targets_masked_are_quiet(tmp_path, source):
    report = _run(tmp_path, source)
    assert not _codes(report, UNUSED, CARRY), [f.message for f in _codes(report, UNUSED, CARRY)]


# ---------------------------------------------------------------- returns and GAE carried across episode ends
# (1) PPO-style GAE over a rollout of lists, the mario shape: bootstrap masked, running gae not
GAE_LISTS = """
    import torch
    import torch.nn as nn

    torch.manual_seed(3)
    net = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.Adam(net.parameters(), lr=3e-4)
    gamma, lam = 0.99, 0.95
    for it in range(4):
        obs, rews, dones = [], [], []
        for t in range(48):
            o = torch.randn(8, 4)
            obs.append(o); rews.append(torch.randn(8)); dones.append((torch.rand(8) < 0.1).float())
        with torch.no_grad():
            values = [net(o).squeeze(-1) for o in obs]
            next_value = net(torch.randn(8, 4)).squeeze(-1)
        gae = 0
        returns = []
        for value, reward, done in list(zip(values, rews, dones))[::-1]:
            delta = reward + gamma * next_value * (1 - done) - value
            gae = delta + gamma * lam * gae  # HERE
            next_value = value
            returns.insert(0, gae + value)
        ret = torch.stack(returns)
        loss = ((net(torch.stack(obs)).squeeze(-1) - ret) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
"""

# (2) Monte-Carlo discounted returns in a function with an index loop over a tensor of dones
RETURNS_FUNCTION = """
    import torch
    import torch.nn as nn
    from torch.distributions import Categorical

    def discounted_returns(rewards, dones, gamma=0.99):
        out = torch.zeros_like(rewards)
        running = torch.zeros(rewards.shape[1])
        for t in reversed(range(rewards.shape[0])):
            running = rewards[t] + gamma * running  # HERE
            out[t] = running * (1 - dones[t])
        return out

    def update(policy, opt, states, actions, rewards, dones):
        returns = discounted_returns(rewards, dones)
        logp = Categorical(logits=policy(states)).log_prob(actions)
        loss = -(logp * returns).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    torch.manual_seed(4)
    policy = nn.Linear(5, 3)
    opt = torch.optim.SGD(policy.parameters(), lr=0.01)
    for it in range(3):
        T, E = 40, 6
        states = torch.randn(T, E, 5)
        actions = torch.randint(0, 3, (T, E))
        rewards = torch.randn(T, E)
        dones = (torch.rand(T, E) < 0.08).float()
        update(policy, opt, states, actions, rewards, dones)
"""

# (3) an A2C class whose n-step return masks the value with not_done but carries R
A2C_CLASS = """
    import torch
    import torch.nn as nn

    class A2C:
        def __init__(self):
            self.body = nn.Sequential(nn.Linear(4, 24), nn.ReLU())
            self.pi, self.v = nn.Linear(24, 2), nn.Linear(24, 1)
            params = [*self.body.parameters(), *self.pi.parameters(), *self.v.parameters()]
            self.opt = torch.optim.Adam(params, lr=1e-3)
            self.gamma = 0.9

        def train_on(self, states, actions, rewards, not_dones, last_state):
            h = self.body(states)
            values = self.v(h).squeeze(-1)
            with torch.no_grad():
                R = self.v(self.body(last_state)).squeeze(-1)
            targets = []
            for r, nd in zip(reversed(rewards), reversed(not_dones)):
                R = r + self.gamma * R  # HERE
                targets.append(R * nd + r * (1 - nd))
            targets = torch.stack(targets[::-1])
            adv = (targets - values).detach()
            logp = torch.log_softmax(self.pi(h), -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
            loss = -(logp * adv).mean() + 0.5 * ((targets - values) ** 2).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()

    torch.manual_seed(5)
    agent = A2C()
    for it in range(3):
        states = torch.randn(20, 4, 4)
        nd = (torch.rand(20, 4) > 0.1).float()
        agent.train_on(states, torch.randint(0, 2, (20, 4)), list(torch.randn(20, 4)), list(nd), torch.randn(4, 4))
"""


@pytest.mark.parametrize("source", [GAE_LISTS, RETURNS_FUNCTION, A2C_CLASS], ids=["gae_lists", "returns_fn", "a2c"])
def test_return_carried_across_episode_end_is_found(tmp_path, source):
    report = _run(tmp_path, source)
    found = _codes(report, CARRY)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    f = found[0]
    assert f.line == _line(source)
    assert f.severity.value == "warning"
    assert 0 < f.evidence["terminal_flags"] < f.evidence["transitions"]
    assert "without the done mask the loop applies to another term" in f.message


CARRY_FIXED = {
    "gae_masked": GAE_LISTS.replace("gae = delta + gamma * lam * gae  # HERE",
                                    "gae = delta + gamma * lam * (1 - done) * gae"),
    "gae_reset": GAE_LISTS.replace("gae = delta + gamma * lam * gae  # HERE",
                                   "gae = delta + gamma * lam * gae\n            if done.all():\n"
                                   "                gae = 0").replace("(torch.rand(8) < 0.1)", "(torch.rand(8) < 2)"),
    "cleanrl_nextnonterminal": RETURNS_FUNCTION.replace(
        """            running = rewards[t] + gamma * running  # HERE""",
        """            nextnonterminal = 1.0 - dones[t]
            running = rewards[t] + gamma * nextnonterminal * running"""),
    "a2c_masked": A2C_CLASS.replace("R = r + self.gamma * R  # HERE", "R = r + self.gamma * R * nd"),
    "augassign_mask": GAE_LISTS.replace("gae = delta + gamma * lam * gae  # HERE",
                                        "gae *= (1 - done)\n            gae = delta + gamma * lam * gae"),
}


@pytest.mark.parametrize("source", list(CARRY_FIXED.values()), ids=list(CARRY_FIXED))
def test_returns_masked_are_quiet(tmp_path, source):
    report = _run(tmp_path, source)
    assert not _codes(report, UNUSED, CARRY), [f.message for f in _codes(report, UNUSED, CARRY)]


def test_reversed_loop_without_episode_flags_is_quiet(tmp_path):
    # a plain discounted sum over one episode (no done flags anywhere): nothing to cut
    source = RETURNS_FUNCTION.replace("out[t] = running * (1 - dones[t])", "out[t] = running")
    report = _run(tmp_path, source)
    assert not _codes(report, UNUSED, CARRY)
