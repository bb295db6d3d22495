# Source: DLR-RM/stable-baselines3, stable_baselines3/ppo/ppo.py (PPO.__init__, PPO.train), stable_baselines3/common/on_policy_algorithm.py (collect_rollouts), stable_baselines3/common/buffers.py (RolloutBuffer), commit 59af0c1b01f5905026fa0074fa5339642418992d
# Report: https://github.com/DLR-RM/stable-baselines3/issues/325
# Stable-Baselines3 PPO with its rollout buffer (GAE), mini-batch generator and clipped
# surrogate update, on a CartPole written in numpy (one environment, auto-reset). gym,
# the VecEnv / callback / logger machinery and the policy class hierarchy are reduced to
# an MLP actor-critic with the same forward / evaluate_actions contract.
import math
import warnings

import numpy as np
import torch as th
from torch import nn
from torch.nn import functional as F


class CartPole:
    """Classic cart-pole (gym CartPole-v1 dynamics), 500-step limit."""
    def __init__(self, seed):
        self.rng = np.random.RandomState(seed)
        self.num_envs = 1

    def reset(self):
        self.state = self.rng.uniform(-0.05, 0.05, size=4)
        self.t = 0
        return self.state.astype(np.float32)[None]

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if int(action[0]) == 1 else -10.0
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot ** 2 * sintheta) / 1.1
        thetaacc = (9.8 * sintheta - costheta * temp) / (0.5 * (4.0 / 3.0 - 0.1 * costheta ** 2 / 1.1))
        xacc = temp - 0.05 * thetaacc * costheta / 1.1
        x, x_dot = x + 0.02 * x_dot, x_dot + 0.02 * xacc
        theta, theta_dot = theta + 0.02 * theta_dot, theta_dot + 0.02 * thetaacc
        self.state = np.array([x, x_dot, theta, theta_dot])
        self.t += 1
        done = bool(abs(x) > 2.4 or abs(theta) > 12 * 2 * math.pi / 360 or self.t >= 500)
        info = {"episode_length": self.t} if done else {}
        obs = self.state.astype(np.float32)[None]
        if done:
            obs = self.reset()
        return obs, np.array([1.0], dtype=np.float32), np.array([done]), [info]


class ActorCriticPolicy(nn.Module):
    def __init__(self, obs_dim, n_actions, lr):
        super().__init__()
        self.mlp_extractor_pi = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
        self.mlp_extractor_vf = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
        self.action_net = nn.Linear(64, n_actions)
        self.value_net = nn.Linear(64, 1)
        self.optimizer = th.optim.Adam(self.parameters(), lr=lr, eps=1e-5)

    def forward(self, obs):
        dist = th.distributions.Categorical(logits=self.action_net(self.mlp_extractor_pi(obs)))
        actions = dist.sample()
        return actions, self.value_net(self.mlp_extractor_vf(obs)), dist.log_prob(actions)

    def evaluate_actions(self, obs, actions):
        dist = th.distributions.Categorical(logits=self.action_net(self.mlp_extractor_pi(obs)))
        values = self.value_net(self.mlp_extractor_vf(obs))
        return values, dist.log_prob(actions), dist.entropy()

    def predict_values(self, obs):
        return self.value_net(self.mlp_extractor_vf(obs))


class RolloutBuffer:
    def __init__(self, buffer_size, obs_dim, gamma, gae_lambda, n_envs=1):
        self.buffer_size, self.obs_dim, self.gamma, self.gae_lambda, self.n_envs = buffer_size, obs_dim, gamma, gae_lambda, n_envs
        self.reset()

    def reset(self):
        self.observations = np.zeros((self.buffer_size, self.n_envs, self.obs_dim), dtype=np.float32)
        self.actions = np.zeros((self.buffer_size, self.n_envs, 1), dtype=np.float32)
        self.rewards = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.returns = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.episode_starts = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.values = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.log_probs = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.advantages = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.generator_ready = False
        self.pos = 0
        self.full = False

    def compute_returns_and_advantage(self, last_values, dones):
        last_values = last_values.clone().cpu().numpy().flatten()

        last_gae_lam = 0
        for step in reversed(range(self.buffer_size)):
            if step == self.buffer_size - 1:
                next_non_terminal = 1.0 - dones
                next_values = last_values
            else:
                next_non_terminal = 1.0 - self.episode_starts[step + 1]
                next_values = self.values[step + 1]
            delta = self.rewards[step] + self.gamma * next_values * next_non_terminal - self.values[step]
            last_gae_lam = delta + self.gamma * self.gae_lambda * next_non_terminal * last_gae_lam
            self.advantages[step] = last_gae_lam
        self.returns = self.advantages + self.values

    def add(self, obs, action, reward, episode_start, value, log_prob):
        self.observations[self.pos] = np.array(obs).copy()
        self.actions[self.pos] = np.array(action).copy()
        self.rewards[self.pos] = np.array(reward).copy()
        self.episode_starts[self.pos] = np.array(episode_start).copy()
        self.values[self.pos] = value.clone().cpu().numpy().flatten()
        self.log_probs[self.pos] = log_prob.clone().cpu().numpy()
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True

    @staticmethod
    def swap_and_flatten(arr):
        shape = arr.shape
        if len(shape) < 3:
            shape = shape + (1,)
        return arr.swapaxes(0, 1).reshape(shape[0] * shape[1], *shape[2:])

    def get(self, batch_size=None):
        assert self.full, ""
        indices = np.random.permutation(self.buffer_size * self.n_envs)
        if not self.generator_ready:
            for tensor in ["observations", "actions", "values", "log_probs", "advantages", "returns"]:
                self.__dict__[tensor] = self.swap_and_flatten(self.__dict__[tensor])
            self.generator_ready = True

        if batch_size is None:
            batch_size = self.buffer_size * self.n_envs

        start_idx = 0
        while start_idx < self.buffer_size * self.n_envs:
            yield self._get_samples(indices[start_idx : start_idx + batch_size])
            start_idx += batch_size

    def _get_samples(self, batch_inds):
        return {
            "observations": th.as_tensor(self.observations[batch_inds]),
            "actions": th.as_tensor(self.actions[batch_inds]),
            "old_values": th.as_tensor(self.values[batch_inds].flatten()),
            "old_log_prob": th.as_tensor(self.log_probs[batch_inds].flatten()),
            "advantages": th.as_tensor(self.advantages[batch_inds].flatten()),
            "returns": th.as_tensor(self.returns[batch_inds].flatten()),
        }


class PPO:
    def __init__(self, env, learning_rate=3e-4, n_steps=2048, batch_size=64, n_epochs=10, gamma=0.99,
                 gae_lambda=0.95, clip_range=0.2, normalize_advantage=True, ent_coef=0.0, vf_coef=0.5,
                 max_grad_norm=0.5, seed=0):
        th.manual_seed(seed)
        np.random.seed(seed)
        self.env, self.n_steps, self.gamma, self.gae_lambda = env, n_steps, gamma, gae_lambda
        self.ent_coef, self.vf_coef, self.max_grad_norm = ent_coef, vf_coef, max_grad_norm
        self.policy = ActorCriticPolicy(4, 2, learning_rate)
        self.rollout_buffer = RolloutBuffer(n_steps, 4, gamma, gae_lambda)

        # Sanity check, otherwise it will lead to noisy gradient and NaN
        # because of the advantage normalization
        if normalize_advantage:
            assert (
                batch_size > 1
            ), "`batch_size` must be greater than 1. See https://github.com/DLR-RM/stable-baselines3/issues/440"

        if self.env is not None:
            buffer_size = self.env.num_envs * self.n_steps
            assert (
                buffer_size > 1
            ), f"`n_steps * n_envs` must be greater than 1. Currently n_steps={self.n_steps} and n_envs={self.env.num_envs}"
            untruncated_batches = buffer_size // batch_size
            if buffer_size % batch_size > 0:
                warnings.warn(
                    f"You have specified a mini-batch size of {batch_size},"
                    f" but because the `RolloutBuffer` is of size `n_steps * n_envs = {buffer_size}`,"
                    f" after every {untruncated_batches} untruncated mini-batches,"
                    f" there will be a truncated mini-batch of size {buffer_size % batch_size}\n"
                    f"We recommend using a `batch_size` that is a factor of `n_steps * n_envs`.\n"
                    f"Info: (n_steps={self.n_steps} and n_envs={self.env.num_envs})"
                )
        self.batch_size = batch_size
        self.n_epochs = n_epochs
        self.clip_range = clip_range
        self.normalize_advantage = normalize_advantage
        self._last_obs = env.reset()
        self._last_episode_starts = np.ones((1,), dtype=bool)
        self.ep_lengths = []

    def collect_rollouts(self, env, rollout_buffer, n_rollout_steps):
        self.policy.train(False)
        n_steps = 0
        rollout_buffer.reset()
        while n_steps < n_rollout_steps:
            with th.no_grad():
                obs_tensor = th.as_tensor(self._last_obs)
                actions, values, log_probs = self.policy(obs_tensor)
            actions = actions.cpu().numpy()
            new_obs, rewards, dones, infos = env.step(actions)
            for info in infos:
                if "episode_length" in info:
                    self.ep_lengths.append(info["episode_length"])
            n_steps += 1
            actions = actions.reshape(-1, 1)
            rollout_buffer.add(self._last_obs, actions, rewards, self._last_episode_starts, values, log_probs)
            self._last_obs = new_obs
            self._last_episode_starts = dones

        with th.no_grad():
            values = self.policy.predict_values(th.as_tensor(new_obs))
        rollout_buffer.compute_returns_and_advantage(last_values=values, dones=dones)
        return True

    def train(self):
        self.policy.train(True)
        clip_range = self.clip_range
        entropy_losses, pg_losses, value_losses = [], [], []

        for epoch in range(self.n_epochs):
            for rollout_data in self.rollout_buffer.get(self.batch_size):
                actions = rollout_data["actions"].long().flatten()

                values, log_prob, entropy = self.policy.evaluate_actions(rollout_data["observations"], actions)
                values = values.flatten()
                # Normalize advantage
                advantages = rollout_data["advantages"]
                if self.normalize_advantage:
                    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

                # ratio between old and new policy, should be one at the first iteration
                ratio = th.exp(log_prob - rollout_data["old_log_prob"])

                # clipped surrogate loss
                policy_loss_1 = advantages * ratio
                policy_loss_2 = advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)
                policy_loss = -th.min(policy_loss_1, policy_loss_2).mean()
                pg_losses.append(policy_loss.item())

                values_pred = values
                value_loss = F.mse_loss(rollout_data["returns"], values_pred)
                value_losses.append(value_loss.item())

                entropy_loss = -th.mean(entropy)
                entropy_losses.append(entropy_loss.item())

                loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss

                # Optimization step
                self.policy.optimizer.zero_grad()
                loss.backward()
                # Clip grad norm
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()
        return np.mean(pg_losses), np.mean(value_losses), np.mean(entropy_losses)

    def learn(self, total_timesteps):
        iteration = 0
        num_timesteps = 0
        while num_timesteps < total_timesteps:
            self.collect_rollouts(self.env, self.rollout_buffer, n_rollout_steps=self.n_steps)
            num_timesteps += self.n_steps
            iteration += 1
            pg, vf, ent = self.train()
            recent = self.ep_lengths[-10:]
            w = self.policy.action_net.weight
            print(f"iteration {iteration:2d} timesteps {num_timesteps:5d} ep_len_mean {np.mean(recent) if recent else float('nan'):6.1f} "
                  f"policy_gradient_loss {pg:.4f} value_loss {vf:.3f} entropy_loss {ent:.4f} "
                  f"action_net.weight finite {bool(th.isfinite(w).all())}")


def main():
    env = CartPole(seed=0)
    model = PPO(env, learning_rate=1e-3, n_steps=257, batch_size=64, n_epochs=10, seed=0)
    model.learn(total_timesteps=257 * 24)


if __name__ == "__main__":
    main()
