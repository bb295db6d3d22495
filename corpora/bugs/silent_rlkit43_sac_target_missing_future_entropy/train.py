# Source: rail-berkeley/rlkit, rlkit/torch/sac/sac.py, rlkit/torch/sac/policies.py, rlkit/torch/networks.py, commit 76be8716881d9674082991bf33a65243003144d1
# Report: https://github.com/rail-berkeley/rlkit/issues/43
from collections import OrderedDict

import numpy as np
import torch
import torch.optim as optim
from torch import nn as nn
from torch.distributions import Normal

LOG_SIG_MAX = 2
LOG_SIG_MIN = -20


def soft_update_from_to(source, target, tau):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(target_param.data * (1.0 - tau) + param.data * tau)


class Mlp(nn.Module):
    def __init__(self, hidden_sizes, output_size, input_size, init_w=3e-3):
        super().__init__()
        self.fcs = nn.ModuleList()
        in_size = input_size
        for next_size in hidden_sizes:
            self.fcs.append(nn.Linear(in_size, next_size))
            in_size = next_size
        self.last_fc = nn.Linear(in_size, output_size)
        self.last_fc.weight.data.uniform_(-init_w, init_w)
        self.last_fc.bias.data.uniform_(-init_w, init_w)

    def forward(self, input):
        h = input
        for fc in self.fcs:
            h = torch.relu(fc(h))
        return self.last_fc(h)


class FlattenMlp(Mlp):
    def forward(self, *inputs, **kwargs):
        flat_inputs = torch.cat(inputs, dim=1)
        return super().forward(flat_inputs, **kwargs)


class TanhNormal:
    def __init__(self, normal_mean, normal_std, epsilon=1e-6):
        self.normal_mean = normal_mean
        self.normal_std = normal_std
        self.normal = Normal(normal_mean, normal_std)
        self.epsilon = epsilon

    def log_prob(self, value, pre_tanh_value):
        return self.normal.log_prob(pre_tanh_value) - torch.log(1 - value * value + self.epsilon)

    def rsample(self):
        z = self.normal_mean + self.normal_std * Normal(
            torch.zeros_like(self.normal_mean), torch.ones_like(self.normal_std)).sample()
        return torch.tanh(z), z


class TanhGaussianPolicy(Mlp):
    def __init__(self, hidden_sizes, obs_dim, action_dim, init_w=1e-3):
        super().__init__(hidden_sizes, input_size=obs_dim, output_size=action_dim, init_w=init_w)
        last_hidden_size = hidden_sizes[-1]
        self.last_fc_log_std = nn.Linear(last_hidden_size, action_dim)
        self.last_fc_log_std.weight.data.uniform_(-init_w, init_w)
        self.last_fc_log_std.bias.data.uniform_(-init_w, init_w)

    def forward(self, obs, reparameterize=True, deterministic=False, return_log_prob=False):
        h = obs
        for fc in self.fcs:
            h = torch.relu(fc(h))
        mean = self.last_fc(h)
        log_std = torch.clamp(self.last_fc_log_std(h), LOG_SIG_MIN, LOG_SIG_MAX)
        std = torch.exp(log_std)
        log_prob = None
        pre_tanh_value = None
        if deterministic:
            action = torch.tanh(mean)
        else:
            tanh_normal = TanhNormal(mean, std)
            action, pre_tanh_value = tanh_normal.rsample()
            if return_log_prob:
                log_prob = tanh_normal.log_prob(action, pre_tanh_value).sum(dim=1, keepdim=True)
        return action, mean, log_std, log_prob, std, pre_tanh_value


class SACTrainer:
    def __init__(self, policy, qf1, qf2, target_qf1, target_qf2, discount=0.99, reward_scale=1.0,
                 policy_lr=1e-3, qf_lr=1e-3, optimizer_class=optim.Adam, soft_target_tau=1e-2,
                 target_update_period=1, use_automatic_entropy_tuning=True, target_entropy=None):
        self.policy = policy
        self.qf1 = qf1
        self.qf2 = qf2
        self.target_qf1 = target_qf1
        self.target_qf2 = target_qf2
        self.soft_target_tau = soft_target_tau
        self.target_update_period = target_update_period
        self.use_automatic_entropy_tuning = use_automatic_entropy_tuning
        if self.use_automatic_entropy_tuning:
            self.target_entropy = target_entropy
            self.log_alpha = torch.zeros(1, requires_grad=True)
            self.alpha_optimizer = optimizer_class([self.log_alpha], lr=policy_lr)
        self.qf_criterion = nn.MSELoss()
        self.policy_optimizer = optimizer_class(self.policy.parameters(), lr=policy_lr)
        self.qf1_optimizer = optimizer_class(self.qf1.parameters(), lr=qf_lr)
        self.qf2_optimizer = optimizer_class(self.qf2.parameters(), lr=qf_lr)
        self.discount = discount
        self.reward_scale = reward_scale
        self.eval_statistics = OrderedDict()
        self._n_train_steps_total = 0

    def train_from_torch(self, batch):
        rewards = batch['rewards']
        terminals = batch['terminals']
        obs = batch['observations']
        actions = batch['actions']
        next_obs = batch['next_observations']

        q1_pred = self.qf1(obs, actions)
        q2_pred = self.qf2(obs, actions)
        # Make sure policy accounts for squashing functions like tanh correctly!
        new_next_actions, *_ = self.policy(
            next_obs, reparameterize=True, return_log_prob=True,
        )

        """
        QF Loss
        """
        target_q_values = torch.min(
            self.target_qf1(next_obs, new_next_actions),
            self.target_qf2(next_obs, new_next_actions),
        )
        q_target = self.reward_scale * rewards + (1. - terminals) * self.discount * target_q_values
        qf1_loss = self.qf_criterion(q1_pred, q_target.detach())
        qf2_loss = self.qf_criterion(q2_pred, q_target.detach())

        """
        Policy and Alpha Loss
        """
        new_obs_actions, policy_mean, policy_log_std, log_pi, *_ = self.policy(
            obs, reparameterize=True, return_log_prob=True,
        )
        if self.use_automatic_entropy_tuning:
            alpha_loss = -(self.log_alpha * (log_pi + self.target_entropy).detach()).mean()
            self.alpha_optimizer.zero_grad()
            alpha_loss.backward()
            self.alpha_optimizer.step()
            alpha = self.log_alpha.exp()
        else:
            alpha_loss = 0
            alpha = 1

        q_new_actions = torch.min(
            self.qf1(obs, new_obs_actions),
            self.qf2(obs, new_obs_actions),
        )
        policy_loss = (alpha*log_pi - q_new_actions).mean()

        """
        Update networks
        """
        self.policy_optimizer.zero_grad()
        policy_loss.backward()
        self.policy_optimizer.step()

        self.qf1_optimizer.zero_grad()
        qf1_loss.backward()
        self.qf1_optimizer.step()

        self.qf2_optimizer.zero_grad()
        qf2_loss.backward()
        self.qf2_optimizer.step()

        """
        Soft Updates
        """
        if self._n_train_steps_total % self.target_update_period == 0:
            soft_update_from_to(self.qf1, self.target_qf1, self.soft_target_tau)
            soft_update_from_to(self.qf2, self.target_qf2, self.soft_target_tau)

        self.eval_statistics['QF1 Loss'] = qf1_loss.item()
        self.eval_statistics['Q1 Predictions'] = q1_pred.mean().item()
        self.eval_statistics['Log Pis'] = log_pi.mean().item()
        self._n_train_steps_total += 1


class PointEnv:
    """Move a point on a line towards the origin; fixed horizon, terminal at the last step."""

    def __init__(self, horizon=10, seed=0):
        self.horizon = horizon
        self.rng = np.random.RandomState(seed)

    def reset(self):
        self.x = self.rng.uniform(-2, 2)
        self.t = 0
        return self._obs()

    def _obs(self):
        return np.array([self.x, self.t / self.horizon], dtype=np.float32)

    def step(self, action):
        self.x = float(np.clip(self.x + 0.5 * float(action[0]), -3, 3))
        self.t += 1
        reward = -self.x ** 2
        done = self.t >= self.horizon
        return self._obs(), reward, done


class ReplayBuffer:
    def __init__(self, size, obs_dim, act_dim, seed=0):
        self.o = np.zeros((size, obs_dim), np.float32)
        self.a = np.zeros((size, act_dim), np.float32)
        self.r = np.zeros((size, 1), np.float32)
        self.d = np.zeros((size, 1), np.float32)
        self.o2 = np.zeros((size, obs_dim), np.float32)
        self.n, self.size = 0, size
        self.rng = np.random.RandomState(seed)

    def add(self, o, a, r, o2, d):
        i = self.n % self.size
        self.o[i], self.a[i], self.r[i], self.o2[i], self.d[i] = o, a, r, o2, d
        self.n += 1

    def random_batch(self, batch_size):
        idx = self.rng.randint(0, min(self.n, self.size), batch_size)
        return {'observations': torch.from_numpy(self.o[idx]), 'actions': torch.from_numpy(self.a[idx]),
                'rewards': torch.from_numpy(self.r[idx]), 'terminals': torch.from_numpy(self.d[idx]),
                'next_observations': torch.from_numpy(self.o2[idx])}


def rollout(env, policy, buffer=None):
    o = env.reset()
    path = []
    done = False
    while not done:
        with torch.no_grad():
            a, _, _, log_pi, *_ = policy(torch.from_numpy(o)[None], return_log_prob=True)
        a = a[0].numpy()
        o2, r, done = env.step(a)
        if buffer is not None:
            buffer.add(o, a, r, o2, float(done))
        path.append((o, a, r, log_pi.item()))
        o = o2
    return path


def soft_q_check(policy, qf1, env, discount, alpha, n=200):
    # Monte Carlo soft Q of the first (state, action) of fresh episodes:
    # r_0 + sum_t>=1 discount^t (r_t - alpha * log pi(a_t|s_t)), compared with qf1(s_0, a_0)
    mc, pred = [], []
    for _ in range(n):
        path = rollout(env, policy)
        ret = path[0][2]
        for t in range(1, len(path)):
            ret += discount ** t * (path[t][2] - alpha * path[t][3])
        mc.append(ret)
        with torch.no_grad():
            pred.append(qf1(torch.from_numpy(path[0][0])[None], torch.from_numpy(path[0][1])[None]).item())
    return float(np.mean(pred)), float(np.mean(mc))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    obs_dim, action_dim = 2, 1
    env = PointEnv(seed=0)
    eval_env = PointEnv(seed=1)
    M = 64
    qf1 = FlattenMlp(input_size=obs_dim + action_dim, output_size=1, hidden_sizes=[M, M])
    qf2 = FlattenMlp(input_size=obs_dim + action_dim, output_size=1, hidden_sizes=[M, M])
    target_qf1 = FlattenMlp(input_size=obs_dim + action_dim, output_size=1, hidden_sizes=[M, M])
    target_qf2 = FlattenMlp(input_size=obs_dim + action_dim, output_size=1, hidden_sizes=[M, M])
    target_qf1.load_state_dict(qf1.state_dict())
    target_qf2.load_state_dict(qf2.state_dict())
    policy = TanhGaussianPolicy(obs_dim=obs_dim, action_dim=action_dim, hidden_sizes=[M, M])
    trainer = SACTrainer(policy=policy, qf1=qf1, qf2=qf2, target_qf1=target_qf1, target_qf2=target_qf2,
                         discount=0.99, soft_target_tau=2e-2, policy_lr=3e-4, qf_lr=3e-4,
                         use_automatic_entropy_tuning=False)
    buffer = ReplayBuffer(20000, obs_dim, action_dim)

    for _ in range(10):
        rollout(env, policy, buffer)
    for epoch in range(6):
        returns = []
        for _ in range(10):
            path = rollout(env, policy, buffer)
            returns.append(sum(p[2] for p in path))
            for _ in range(30):
                trainer.train_from_torch(buffer.random_batch(128))
        stats = trainer.eval_statistics
        q_pred, q_mc = soft_q_check(policy, qf1, eval_env, trainer.discount, alpha=1.0, n=50)
        print(f"epoch {epoch} return {np.mean(returns):7.3f} QF1 loss {stats['QF1 Loss']:.4f} "
              f"log_pi {stats['Log Pis']:6.3f} | Q1(s0,a0) {q_pred:7.3f} vs Monte Carlo soft Q {q_mc:7.3f}")


if __name__ == "__main__":
    main()
