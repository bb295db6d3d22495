"""DQN: epsilon-greedy with a linear schedule, a replay buffer, the TD target from the target
network under no_grad (max over actions), F.mse_loss(td_target, old_val) (target first, as the
script writes it), a soft/hard target update through .data.copy_, and a state_dict saved at the end.

Source: vwxyzjn/cleanrl, cleanrl/dqn.py, commit fe8d8a03c41a7ef5b523e2e354bd01c363e786bb.
Reduced: hidden 16/16, numpy cart-pole (_env.py), 40 env steps, learning starts at 8, train
every 2 steps, batch 8, target update every 4 steps; the tensorboard writer is dropped.

Mutation: `.squeeze()` dropped from `old_val`: F.mse_loss((N,) target, (N,1) value) broadcasts to (N,N).
Expected: error silent.loss_broadcast at the `F.mse_loss(td_target, old_val)` line.
"""

import io
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

from corpus._env import CartPole
from corpus._rb import ReplayBuffer

total_timesteps, learning_starts, train_frequency, target_network_frequency = 40, 8, 2, 4
start_e, end_e, exploration_fraction, gamma, tau, batch_size = 1.0, 0.05, 0.5, 0.99, 1.0, 8


class QNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.network = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x):
        return self.network(x)


def linear_schedule(start_e, end_e, duration, t):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def build():
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    env = CartPole(seed=2)
    q_network = QNetwork()
    optimizer = optim.Adam(q_network.parameters(), lr=2.5e-4)
    target_network = QNetwork()
    target_network.load_state_dict(q_network.state_dict())
    rb = ReplayBuffer(100, 4, (1,), np.int64)

    def train():
        obs, _ = env.reset(seed=1)
        obs = obs[None]
        for global_step in range(total_timesteps):
            epsilon = linear_schedule(start_e, end_e, exploration_fraction * total_timesteps, global_step)
            if random.random() < epsilon:
                actions = np.array([random.randrange(2)])
            else:
                q_values = q_network(torch.Tensor(obs))
                actions = torch.argmax(q_values, dim=1).cpu().numpy()
            next_obs, rewards, terminations, truncations, infos = env.step(actions[0])
            real_next_obs = next_obs.copy()
            rb.add(obs[0], real_next_obs, actions, rewards, terminations, infos)
            obs = next_obs[None]
            if terminations or truncations:
                obs = env.reset()[0][None]
            if global_step > learning_starts:
                if global_step % train_frequency == 0:
                    data = rb.sample(batch_size)
                    with torch.no_grad():
                        target_max, _ = target_network(data.next_observations).max(dim=1)
                        td_target = data.rewards.flatten() + gamma * target_max * (1 - data.dones.flatten())
                    old_val = q_network(data.observations).gather(1, data.actions)
                    loss = F.mse_loss(td_target, old_val)  # <- bug
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                if global_step % target_network_frequency == 0:
                    for target_network_param, q_network_param in zip(target_network.parameters(), q_network.parameters()):
                        target_network_param.data.copy_(tau * q_network_param.data + (1.0 - tau) * target_network_param.data)
        torch.save(q_network.state_dict(), io.BytesIO())

    return [q_network, target_network], [optimizer], train


if __name__ == "__main__":
    build()[2]()
