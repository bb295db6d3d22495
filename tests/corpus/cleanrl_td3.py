"""TD3: a deterministic tanh actor with action_scale / action_bias buffers, twin Q networks and
target copies of all three networks, target policy smoothing (clipped Gaussian noise on the target
action) under no_grad, the clipped double-Q target, one q_optimizer over both critics, delayed
actor updates every policy_frequency steps (actor_loss = -qf1(obs, actor(obs)).mean()), and Polyak
updates through .data.copy_.

Source: vwxyzjn/cleanrl, cleanrl/td3_continuous_action.py, commit 04894fb67851ff9a6b9a3c93832b705a3b69f9a0.
Reduced: hidden 16, the numpy pendulum of _env.py, 30 env steps, learning starts at 8, batch 8.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

from corpus._env import Pendulum
from corpus._rb import ReplayBuffer

total_timesteps, learning_starts, batch_size, policy_frequency = 30, 8, 8, 2
gamma, tau, policy_noise, noise_clip, exploration_noise = 0.99, 0.005, 0.2, 0.5, 0.1


class QNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3 + 1, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 1)

    def forward(self, x, a):
        x = torch.cat([x, a], 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc_mu = nn.Linear(16, 1)
        self.register_buffer("action_scale", torch.tensor([2.0], dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor([0.0], dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = torch.tanh(self.fc_mu(x))
        return x * self.action_scale + self.action_bias


def build():
    np.random.seed(1)
    torch.manual_seed(1)
    env = Pendulum(seed=2)
    actor, qf1, qf2 = Actor(), QNetwork(), QNetwork()
    target_actor, qf1_target, qf2_target = Actor(), QNetwork(), QNetwork()
    target_actor.load_state_dict(actor.state_dict())
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=3e-4)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=3e-4)
    rb = ReplayBuffer(100, 3, (1,))

    def train():
        obs, _ = env.reset(seed=1)
        for global_step in range(total_timesteps):
            if global_step < learning_starts:
                actions = np.random.uniform(-2, 2, size=(1,)).astype(np.float32)
            else:
                with torch.no_grad():
                    actions = actor(torch.Tensor(obs)[None])
                    actions += torch.normal(0, actor.action_scale * exploration_noise)
                    actions = actions.cpu().numpy().clip(-2, 2)[0]
            next_obs, rewards, terminations, truncations, infos = env.step(actions)
            rb.add(obs, next_obs.copy(), actions, rewards, terminations, infos)
            obs = next_obs if not truncations else env.reset()[0]
            if global_step > learning_starts:
                data = rb.sample(batch_size)
                with torch.no_grad():
                    clipped_noise = (torch.randn_like(data.actions) * policy_noise).clamp(
                        -noise_clip, noise_clip) * target_actor.action_scale
                    next_state_actions = (target_actor(data.next_observations) + clipped_noise).clamp(-2.0, 2.0)
                    qf1_next_target = qf1_target(data.next_observations, next_state_actions)
                    qf2_next_target = qf2_target(data.next_observations, next_state_actions)
                    min_qf_next_target = torch.min(qf1_next_target, qf2_next_target)
                    next_q_value = data.rewards.flatten() + (1 - data.dones.flatten()) * gamma * (min_qf_next_target).view(-1)
                qf1_a_values = qf1(data.observations, data.actions).view(-1)
                qf2_a_values = qf2(data.observations, data.actions).view(-1)
                qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
                qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
                qf_loss = qf1_loss + qf2_loss
                q_optimizer.zero_grad()
                qf_loss.backward()
                q_optimizer.step()
                if global_step % policy_frequency == 0:
                    actor_loss = -qf1(data.observations, actor(data.observations)).mean()
                    actor_optimizer.zero_grad()
                    actor_loss.backward()
                    actor_optimizer.step()
                    for param, target_param in zip(actor.parameters(), target_actor.parameters()):
                        target_param.data.copy_(tau * param.data + (1 - tau) * target_param.data)
                    for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                        target_param.data.copy_(tau * param.data + (1 - tau) * target_param.data)
                    for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                        target_param.data.copy_(tau * param.data + (1 - tau) * target_param.data)

    return [actor, qf1, qf2, target_actor, qf1_target, qf2_target], [q_optimizer, actor_optimizer], train


if __name__ == "__main__":
    build()[2]()
