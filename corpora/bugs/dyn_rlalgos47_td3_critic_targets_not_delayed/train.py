# Source: medipixel/rl_algorithms, algorithms/td3/agent.py (Agent.update_model, select_action, train), algorithms/td3/model.py (Actor, Critic), algorithms/utils.py (soft_update), algorithms/noise.py (GaussianNoise), algorithms/replay_buffer.py (ReplayBuffer), commit fcfd0e92798bd55e6b6c3f9a0a754f81c6625fb8
# Report: https://github.com/medipixel/rl_algorithms/pull/47
# TD3 agent: twin critics with target networks, target policy smoothing, delayed actor updates
# (DELAYED_UPDATE=2) and soft target updates (TAU). The gym environment (LunarLanderContinuous /
# Reacher in the repository) is replaced by a 1-D point-mass reaching task with 2-D state and a
# 1-D force in [-1, 1]; episodes of 60 steps, replay buffer, batch 64; wandb/rendering/saving removed.
# The soft_update helper counts its calls per target network for the end-of-run summary.
import random
from collections import defaultdict, deque
from typing import Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

device = torch.device("cpu")

hyper_params = {
    "GAMMA": 0.99,
    "TAU": 1e-2,
    "NOISE_STD": 0.2,
    "NOISE_CLIP": 0.5,
    "DELAYED_UPDATE": 2,
    "BUFFER_SIZE": int(1e5),
    "BATCH_SIZE": 64,
    "MAX_EPISODE_STEPS": 60,
}

SOFT_UPDATE_CALLS = defaultdict(int)


def soft_update(local: nn.Module, target: nn.Module, tau: float):
    """Soft-update: target = tau*local + (1-tau)*target."""
    SOFT_UPDATE_CALLS[target.name] += 1
    for t_param, l_param in zip(target.parameters(), local.parameters()):
        t_param.data.copy_(tau * l_param.data + (1.0 - tau) * t_param.data)


class Actor(nn.Module):
    def __init__(self, state_dim, action_dim, action_low, action_high, name="actor"):
        super(Actor, self).__init__()
        self.name = name
        self.action_low = action_low
        self.action_high = action_high
        self.actor = nn.Sequential(
            nn.Linear(state_dim, 24), nn.ReLU(), nn.Linear(24, 48), nn.ReLU(),
            nn.Linear(48, 24), nn.ReLU(), nn.Linear(24, action_dim), nn.Tanh())

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        action = self.actor(state)
        return action


class Critic(nn.Module):
    def __init__(self, state_dim, action_dim, name="critic"):
        super(Critic, self).__init__()
        self.name = name
        self.critic = nn.Sequential(
            nn.Linear(state_dim + action_dim, 24), nn.ReLU(), nn.Linear(24, 48), nn.ReLU(),
            nn.Linear(48, 24), nn.ReLU(), nn.Linear(24, 1))

    def forward(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat((state, action), dim=-1)
        return self.critic(x)


class GaussianNoise:
    def __init__(self, min_sigma: float = 0.5, max_sigma: float = 0.5, decay_period: int = 1000000):
        self.max_sigma = max_sigma
        self.min_sigma = min_sigma
        self.decay_period = decay_period

    def sample(self, action_size, t: int = 0) -> float:
        sigma = self.max_sigma - (self.max_sigma - self.min_sigma) * min(1.0, t / self.decay_period)
        return np.random.normal(0, sigma, size=action_size)


class ReplayBuffer:
    def __init__(self, buffer_size: int, batch_size: int, seed: int):
        self.memory = deque(maxlen=buffer_size)
        self.batch_size = batch_size
        random.seed(seed)

    def add(self, state, action, reward, next_state, done):
        self.memory.append((state, action, reward, next_state, done))

    def sample(self):
        experiences = random.sample(self.memory, k=self.batch_size)
        states = torch.from_numpy(np.vstack([e[0] for e in experiences])).float().to(device)
        actions = torch.from_numpy(np.vstack([e[1] for e in experiences])).float().to(device)
        rewards = torch.from_numpy(np.vstack([e[2] for e in experiences])).float().to(device)
        next_states = torch.from_numpy(np.vstack([e[3] for e in experiences])).float().to(device)
        dones = torch.from_numpy(np.vstack([e[4] for e in experiences]).astype(np.uint8)).float().to(device)
        return states, actions, rewards, next_states, dones

    def __len__(self):
        return len(self.memory)


class PointMassEnv:
    """1-D point mass: push a unit mass to the goal at x = 0."""
    def __init__(self, seed=0):
        self.rng = np.random.RandomState(seed)
        self._max_episode_steps = 60

    def reset(self):
        self.pos, self.vel, self.t = self.rng.uniform(-2, 2), 0.0, 0
        return np.array([self.pos, self.vel], np.float32)

    def step(self, action):
        force = float(np.clip(action[0], -1, 1))
        self.vel = 0.9 * self.vel + 0.1 * force
        self.pos = self.pos + self.vel
        self.t += 1
        reward = -abs(self.pos) - 0.01 * force ** 2
        done = self.t >= self._max_episode_steps
        return np.array([self.pos, self.vel], np.float32), reward, done, {}


class Agent:
    def __init__(self, env, seed=0):
        self.env = env
        self.state_dim, self.action_dim, self.action_low, self.action_high = 2, 1, -1.0, 1.0
        self.curr_state = np.zeros((self.state_dim,))
        self.n_step = 0
        self.env._max_episode_steps = hyper_params["MAX_EPISODE_STEPS"]

        self.actor = Actor(self.state_dim, self.action_dim, self.action_low, self.action_high).to(device)
        self.actor_target = Actor(self.state_dim, self.action_dim, self.action_low, self.action_high,
                                  name="actor_target").to(device)
        self.actor_target.load_state_dict(self.actor.state_dict())

        self.critic_1 = Critic(self.state_dim, self.action_dim).to(device)
        self.critic_2 = Critic(self.state_dim, self.action_dim).to(device)
        self.critic_target1 = Critic(self.state_dim, self.action_dim, name="critic_target1").to(device)
        self.critic_target2 = Critic(self.state_dim, self.action_dim, name="critic_target2").to(device)
        self.critic_target1.load_state_dict(self.critic_1.state_dict())
        self.critic_target2.load_state_dict(self.critic_2.state_dict())

        self.actor_optimizer = optim.Adam(self.actor.parameters(), lr=1e-3)
        self.critic_optimizer1 = optim.Adam(self.critic_1.parameters(), lr=1e-3)
        self.critic_optimizer2 = optim.Adam(self.critic_2.parameters(), lr=1e-3)

        self.noise = GaussianNoise()
        self.memory = ReplayBuffer(hyper_params["BUFFER_SIZE"], hyper_params["BATCH_SIZE"], seed)

    def select_action(self, state: np.ndarray) -> torch.Tensor:
        self.curr_state = state
        state = torch.FloatTensor(state).to(device)
        selected_action = self.actor(state)
        action_size = selected_action.size()
        selected_action = selected_action + torch.FloatTensor(self.noise.sample(action_size, self.n_step)).to(device)
        return torch.clamp(selected_action, self.action_low, self.action_high)

    def step(self, action: torch.Tensor) -> Tuple[np.ndarray, np.float64, bool]:
        action = action.detach().cpu().numpy()
        next_state, reward, done, _ = self.env.step(action)
        self.memory.add(self.curr_state, action, reward, next_state, done)
        return next_state, reward, done

    def update_model(self, experiences):
        states, actions, rewards, next_states, dones = experiences
        masks = 1 - dones

        # get actions with noise
        next_actions = self.actor_target(next_states)
        noise = torch.normal(torch.zeros(next_actions.size()), hyper_params["NOISE_STD"]).to(device)
        noise = torch.clamp(noise, -hyper_params["NOISE_CLIP"], hyper_params["NOISE_CLIP"])
        next_actions += noise

        # min (Q_1', Q_2')
        next_values1 = self.critic_target1(next_states, next_actions)
        next_values2 = self.critic_target2(next_states, next_actions)
        next_values = torch.min(next_values1, next_values2)

        curr_returns = rewards + hyper_params["GAMMA"] * next_values * masks
        curr_returns = curr_returns.to(device).detach()

        # critic loss
        values1 = self.critic_1(states, actions)
        values2 = self.critic_2(states, actions)
        critic_loss1 = F.mse_loss(values1, curr_returns)
        critic_loss2 = F.mse_loss(values2, curr_returns)

        # train critic
        self.critic_optimizer1.zero_grad()
        critic_loss1.backward()
        self.critic_optimizer1.step()

        self.critic_optimizer2.zero_grad()
        critic_loss2.backward()
        self.critic_optimizer2.step()

        # for logging
        total_loss = critic_loss1 + critic_loss2

        # update target networks
        soft_update(self.critic_1, self.critic_target1, hyper_params["TAU"])
        soft_update(self.critic_2, self.critic_target2, hyper_params["TAU"])

        if self.n_step % hyper_params["DELAYED_UPDATE"] == 0:
            # train actor
            actions = self.actor(states)
            actor_loss = -self.critic_1(states, actions).mean()
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()

            # update target networks
            soft_update(self.actor, self.actor_target, hyper_params["TAU"])

            # for logging
            total_loss += actor_loss

        return total_loss.data

    def train(self, episode_num):
        self.n_step = 0
        for i_episode in range(1, episode_num + 1):
            state = self.env.reset()
            done = False
            score = 0
            loss_episode = list()
            while not done:
                action = self.select_action(state)
                next_state, reward, done = self.step(action)
                if len(self.memory) >= hyper_params["BATCH_SIZE"]:
                    experiences = self.memory.sample()
                    loss = self.update_model(experiences)
                    loss_episode.append(loss)
                state = next_state
                score += reward
                self.n_step += 1
            if loss_episode and i_episode % 5 == 0:
                avg_loss = np.array(loss_episode).mean()
                print("[INFO] episode %d\ttotal score: %.1f\tloss: %f" % (i_episode, score, avg_loss))
        print("soft updates: " + ", ".join(f"{k} {v}" for k, v in sorted(SOFT_UPDATE_CALLS.items())))


if __name__ == "__main__":
    torch.manual_seed(0)
    np.random.seed(0)
    agent = Agent(PointMassEnv(seed=0))
    agent.train(episode_num=25)
