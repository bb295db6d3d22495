"""A tiny CartPole stand-in (the classic cart-pole equations, numpy, no gym) with the
gymnasium step API: reset() -> (obs, info); step(a) -> (obs, reward, terminated, truncated, info).
Episodes are cut at `max_steps` so that every corpus loop stays a few milliseconds long."""

import math

import numpy as np


class CartPole:
    observation_dim, n_actions = 4, 2

    def __init__(self, seed=0, max_steps=12):
        self.rng = np.random.default_rng(seed)
        self.max_steps = max_steps

    def reset(self, seed=None):
        self.state = self.rng.uniform(-0.05, 0.05, size=4)
        self.t = 0
        return self.state.astype(np.float32), {}

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if int(action) == 1 else -10.0
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot ** 2 * sintheta) / 1.1
        thetaacc = (9.8 * sintheta - costheta * temp) / (0.5 * (4.0 / 3.0 - 0.1 * costheta ** 2 / 1.1))
        xacc = temp - 0.05 * thetaacc * costheta / 1.1
        self.state = np.array([x + 0.02 * x_dot, x_dot + 0.02 * xacc, theta + 0.02 * theta_dot,
                               theta_dot + 0.02 * thetaacc])
        self.t += 1
        terminated = bool(abs(self.state[0]) > 2.4 or abs(self.state[2]) > 0.21)
        return self.state.astype(np.float32), 1.0, terminated, self.t >= self.max_steps, {}


class Pendulum:
    """A continuous-action stand-in (1-D action in [-2, 2]) for the SAC / TD3 / DDPG loops."""

    observation_dim, action_dim = 3, 1

    def __init__(self, seed=0, max_steps=12):
        self.rng = np.random.default_rng(seed)
        self.max_steps = max_steps

    def reset(self, seed=None):
        self.th, self.thdot, self.t = self.rng.uniform(-np.pi, np.pi), self.rng.uniform(-1, 1), 0
        return self._obs(), {}

    def _obs(self):
        return np.array([math.cos(self.th), math.sin(self.th), self.thdot], dtype=np.float32)

    def step(self, u):
        u = float(np.clip(np.asarray(u).reshape(-1)[0], -2.0, 2.0))
        cost = self.th ** 2 + 0.1 * self.thdot ** 2 + 0.001 * u ** 2
        self.thdot = float(np.clip(self.thdot + (3 * 10 / 2 * math.sin(self.th) + 3.0 * u) * 0.05, -8, 8))
        self.th = (self.th + self.thdot * 0.05 + np.pi) % (2 * np.pi) - np.pi
        self.t += 1
        return self._obs(), -cost, False, self.t >= self.max_steps, {}
