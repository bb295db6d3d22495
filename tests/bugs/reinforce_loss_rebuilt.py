"""REINFORCE: log-probs saved in a list on the policy, discounted returns in a deque, normalised,
policy_loss = cat(-log_prob * R).sum(), one Adam step per episode.

Source: pytorch/examples, reinforcement_learning/reinforce.py, commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
Reduced: hidden 16, dropout 0.6 kept, a numpy cart-pole cut at 12 steps (_env.py), 3 episodes.

Mutation: the policy loss rebuilt from Python floats (`torch.tensor([...item()...], requires_grad=True)`) after 'element 0 does not require grad': the policy never learns.
Expected: error gradient.cut_to_python (the `.item()` → `torch.tensor` rebuild) naming affine1.weight, ..., at the rebuild line.
"""

from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

from corpus._env import CartPole

gamma = 0.99


class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(4, 16)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(16, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


def build():
    torch.manual_seed(0)
    env = CartPole(seed=1)
    policy = Policy()
    optimizer = optim.Adam(policy.parameters(), lr=1e-2)
    eps = np.finfo(np.float32).eps.item()

    def select_action(state):
        state = torch.from_numpy(state).float().unsqueeze(0)
        probs = policy(state)
        m = Categorical(probs)
        action = m.sample()
        policy.saved_log_probs.append(m.log_prob(action))
        return action.item()

    def finish_episode():
        R = 0
        policy_loss = []
        returns = deque()
        for r in policy.rewards[::-1]:
            R = r + gamma * R
            returns.appendleft(R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for log_prob, R in zip(policy.saved_log_probs, returns):
            policy_loss.append(-log_prob * R)
        optimizer.zero_grad()
        policy_loss = torch.tensor([l.item() for l in policy_loss], requires_grad=True).sum()  # <- bug
        policy_loss.backward()
        optimizer.step()
        del policy.rewards[:]
        del policy.saved_log_probs[:]

    def train():
        for i_episode in range(1, 4):
            state, _ = env.reset()
            for t in range(1, 10000):
                action = select_action(state)
                state, reward, terminated, truncated, _ = env.step(action)
                policy.rewards.append(reward)
                if terminated or truncated:
                    break
            finish_episode()

    return [policy], [optimizer], train


if __name__ == "__main__":
    build()[2]()
