"""SAC (continuous): a tanh-squashed Gaussian actor with action_scale / action_bias buffers, twin
soft Q networks and their targets, the soft target under no_grad, one q_optimizer over both
critics, delayed actor updates (policy_frequency), entropy autotuning of a raw log_alpha tensor
optimized directly by Adam([log_alpha]) with alpha read back by .item(), and Polyak target updates.

Source: vwxyzjn/cleanrl, cleanrl/sac_continuous_action.py, commit fe8d8a03c41a7ef5b523e2e354bd01c363e786bb.
Reduced: hidden 16, a numpy pendulum (_env.py), 30 env steps, learning starts at 8, batch 8,
policy_frequency 2; the tensorboard writer is dropped.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

from corpus._env import Pendulum
from corpus._rb import ReplayBuffer

LOG_STD_MAX, LOG_STD_MIN = 2, -5
total_timesteps, learning_starts, batch_size, policy_frequency, target_network_frequency = 30, 8, 8, 2, 1
gamma, tau = 0.99, 0.005


class SoftQNetwork(nn.Module):
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
        self.fc_mean = nn.Linear(16, 1)
        self.fc_logstd = nn.Linear(16, 1)
        self.register_buffer("action_scale", torch.tensor([2.0], dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor([0.0], dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        mean = self.fc_mean(x)
        log_std = torch.tanh(self.fc_logstd(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        return mean, log_std

    def get_action(self, x):
        mean, log_std = self(x)
        std = log_std.exp()
        normal = torch.distributions.Normal(mean, std)
        x_t = normal.rsample()
        y_t = torch.tanh(x_t)
        action = y_t * self.action_scale + self.action_bias
        log_prob = normal.log_prob(x_t)
        log_prob -= torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        log_prob = log_prob.sum(1, keepdim=True)
        mean = torch.tanh(mean) * self.action_scale + self.action_bias
        return action, log_prob, mean


def build():
    np.random.seed(1)
    torch.manual_seed(1)
    env = Pendulum(seed=1)
    actor = Actor()
    qf1, qf2, qf1_target, qf2_target = SoftQNetwork(), SoftQNetwork(), SoftQNetwork(), SoftQNetwork()
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=1e-3)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=3e-4)
    target_entropy = -torch.prod(torch.Tensor((1,))).item()
    log_alpha = torch.zeros(1, requires_grad=True)
    a_optimizer = optim.Adam([log_alpha], lr=1e-3)
    rb = ReplayBuffer(100, 3, (1,))

    def train():
        alpha = log_alpha.exp().item()
        obs, _ = env.reset(seed=1)
        for global_step in range(total_timesteps):
            if global_step < learning_starts:
                actions = np.random.uniform(-2, 2, size=(1,)).astype(np.float32)
            else:
                actions, _, _ = actor.get_action(torch.Tensor(obs)[None])
                actions = actions.detach().cpu().numpy()[0]
            next_obs, rewards, terminations, truncations, infos = env.step(actions)
            rb.add(obs, next_obs.copy(), actions, rewards, terminations, infos)
            obs = next_obs if not truncations else env.reset()[0]
            if global_step > learning_starts:
                data = rb.sample(batch_size)
                with torch.no_grad():
                    next_state_actions, next_state_log_pi, _ = actor.get_action(data.next_observations)
                    qf1_next_target = qf1_target(data.next_observations, next_state_actions)
                    qf2_next_target = qf2_target(data.next_observations, next_state_actions)
                    min_qf_next_target = torch.min(qf1_next_target, qf2_next_target) - alpha * next_state_log_pi
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
                    for _ in range(policy_frequency):
                        pi, log_pi, _ = actor.get_action(data.observations)
                        qf1_pi = qf1(data.observations, pi)
                        qf2_pi = qf2(data.observations, pi)
                        min_qf_pi = torch.min(qf1_pi, qf2_pi)
                        actor_loss = ((alpha * log_pi) - min_qf_pi).mean()
                        actor_optimizer.zero_grad()
                        actor_loss.backward()
                        actor_optimizer.step()
                        with torch.no_grad():
                            _, log_pi, _ = actor.get_action(data.observations)
                        alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()
                        a_optimizer.zero_grad()
                        alpha_loss.backward()
                        a_optimizer.step()
                        alpha = log_alpha.exp().item()
                if global_step % target_network_frequency == 0:
                    for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                        target_param.data.copy_(tau * param.data + (1 - tau) * target_param.data)
                    for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                        target_param.data.copy_(tau * param.data + (1 - tau) * target_param.data)

    return [actor, qf1, qf2, qf1_target, qf2_target], [q_optimizer, actor_optimizer, a_optimizer], train


if __name__ == "__main__":
    build()[2]()
