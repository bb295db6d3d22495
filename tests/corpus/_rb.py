"""A tiny replay buffer with stable-baselines3's ReplayBuffer.sample() fields (observations,
actions, next_observations, dones, rewards as (B, 1) tensors), for the cleanrl loops."""

from types import SimpleNamespace

import numpy as np
import torch


class ReplayBuffer:
    def __init__(self, size, obs_dim, act_shape, act_dtype=np.float32, seed=0):
        self.obs = np.zeros((size, obs_dim), np.float32)
        self.next_obs = np.zeros((size, obs_dim), np.float32)
        self.actions = np.zeros((size, *act_shape), act_dtype)
        self.rewards = np.zeros((size, 1), np.float32)
        self.dones = np.zeros((size, 1), np.float32)
        self.n, self.size = 0, size
        self.rng = np.random.default_rng(seed)

    def add(self, obs, next_obs, action, reward, done, infos=None):
        i = self.n % self.size
        self.obs[i], self.next_obs[i], self.actions[i] = obs, next_obs, action
        self.rewards[i], self.dones[i] = reward, done
        self.n += 1

    def sample(self, batch_size):
        ix = self.rng.integers(0, min(self.n, self.size), batch_size)
        return SimpleNamespace(observations=torch.from_numpy(self.obs[ix]),
                               next_observations=torch.from_numpy(self.next_obs[ix]),
                               actions=torch.from_numpy(self.actions[ix]), rewards=torch.from_numpy(self.rewards[ix]),
                               dones=torch.from_numpy(self.dones[ix]))
