# Source: AI4Finance-Foundation/ElegantRL, eRL_demo_PPO_inSingleFile.py (ActorPPO, CriticAdv, AgentPPO, ReplayBuffer, train_and_evaluate), commit 698e81a406357855f400612ae8a4e8ea369f46f5
# Report: https://github.com/AI4Finance-Foundation/ElegantRL/issues/183
# ElegantRL single-file PPO for continuous control: Gaussian actor with a trainable log-std, critic,
# on-policy exploration into a ReplayBuffer of (reward, mask = 0 if done else gamma, action, noise),
# prepare_buffer() computing reward sums and GAE advantages, clipped-surrogate actor updates and
# SmoothL1 critic updates, deterministic evaluation after each round. The gym environment is
# replaced by a 1-D point-mass reaching task implemented in numpy (time limit = done).
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


class ActorPPO(nn.Module):
    def __init__(self, mid_dim, state_dim, action_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, mid_dim), nn.ReLU(),
                                 nn.Linear(mid_dim, mid_dim), nn.ReLU(),
                                 nn.Linear(mid_dim, mid_dim), nn.Hardswish(),
                                 nn.Linear(mid_dim, action_dim), )
        layer_norm(self.net[-1], std=0.1)
        self.a_logstd = nn.Parameter(torch.zeros((1, action_dim)) - 0.5, requires_grad=True)
        self.sqrt_2pi_log = np.log(np.sqrt(2 * np.pi))

    def forward(self, state):
        return self.net(state).tanh()

    def get_action(self, state):
        a_avg = self.net(state)
        a_std = self.a_logstd.exp()
        noise = torch.randn_like(a_avg)
        action = a_avg + noise * a_std
        return action, noise

    def get_logprob_entropy(self, state, action):
        a_avg = self.net(state)
        a_std = self.a_logstd.exp()
        delta = ((a_avg - action) / a_std).pow(2) * 0.5
        logprob = -(self.a_logstd + self.sqrt_2pi_log + delta).sum(1)
        dist_entropy = (logprob.exp() * logprob).mean()
        return logprob, dist_entropy

    def get_old_logprob(self, _action, noise):
        delta = noise.pow(2) * 0.5
        return -(self.a_logstd + self.sqrt_2pi_log + delta).sum(1)


class CriticAdv(nn.Module):
    def __init__(self, mid_dim, state_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, mid_dim), nn.ReLU(),
                                 nn.Linear(mid_dim, mid_dim), nn.ReLU(),
                                 nn.Linear(mid_dim, mid_dim), nn.Hardswish(),
                                 nn.Linear(mid_dim, 1))
        layer_norm(self.net[-1], std=0.5)

    def forward(self, state):
        return self.net(state)


def layer_norm(layer, std=1.0, bias_const=1e-6):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)


class AgentPPO:
    def __init__(self):
        super().__init__()
        self.ratio_clip = 0.2
        self.lambda_entropy = 0.02
        self.lambda_gae_adv = 0.98
        self.get_reward_sum = None
        self.state = None
        self.device = None
        self.criterion = None
        self.act = self.act_optimizer = None
        self.cri = self.cri_optimizer = self.cri_target = None

    def init(self, net_dim, state_dim, action_dim, learning_rate=1e-4, if_use_gae=False):
        self.device = torch.device("cpu")
        self.get_reward_sum = self.get_reward_sum_gae if if_use_gae else self.get_reward_sum_raw
        self.act = ActorPPO(net_dim, state_dim, action_dim).to(self.device)
        self.cri = CriticAdv(net_dim, state_dim).to(self.device)
        self.cri_target = deepcopy(self.cri) if self.cri_target is True else self.cri
        self.criterion = torch.nn.SmoothL1Loss()
        self.act_optimizer = torch.optim.Adam(self.act.parameters(), lr=learning_rate)
        self.cri_optimizer = torch.optim.Adam(self.cri.parameters(), lr=learning_rate)

    def select_action(self, state):
        states = torch.as_tensor((state,), dtype=torch.float32, device=self.device)
        actions, noises = self.act.get_action(states)
        return actions[0].detach().cpu().numpy(), noises[0].detach().cpu().numpy()

    def explore_env(self, env, target_step, reward_scale, gamma):
        trajectory_list = list()
        state = self.state
        for _ in range(target_step):
            action, noise = self.select_action(state)
            next_state, reward, done, _ = env.step(np.tanh(action))
            other = (reward * reward_scale, 0.0 if done else gamma, *action, *noise)
            trajectory_list.append((state, other))
            state = env.reset() if done else next_state
        self.state = state
        return trajectory_list

    def update_net(self, buffer, batch_size, repeat_times, soft_update_tau):
        buffer.update_now_len()
        buf_len = buffer.now_len
        buf_state, buf_action, buf_r_sum, buf_logprob, buf_advantage = self.prepare_buffer(buffer)
        buffer.empty_buffer()

        obj_critic = obj_actor = logprob = None
        for _ in range(int(buf_len / batch_size * repeat_times)):
            indices = torch.randint(buf_len, size=(batch_size,), requires_grad=False, device=self.device)
            state = buf_state[indices]
            action = buf_action[indices]
            r_sum = buf_r_sum[indices]
            logprob = buf_logprob[indices]
            advantage = buf_advantage[indices]

            new_logprob, obj_entropy = self.act.get_logprob_entropy(state, action)
            ratio = (new_logprob - logprob.detach()).exp()
            surrogate1 = advantage * ratio
            surrogate2 = advantage * ratio.clamp(1 - self.ratio_clip, 1 + self.ratio_clip)
            obj_surrogate = -torch.min(surrogate1, surrogate2).mean()
            obj_actor = obj_surrogate + obj_entropy * self.lambda_entropy
            self.optim_update(self.act_optimizer, obj_actor)

            value = self.cri(state).squeeze(1)
            obj_critic = self.criterion(value, r_sum) / (r_sum.std() + 1e-6)
            self.optim_update(self.cri_optimizer, obj_critic)
        return obj_critic.item(), obj_actor.item(), logprob.mean().item()

    def prepare_buffer(self, buffer):
        buf_len = buffer.now_len
        with torch.no_grad():
            reward, mask, action, a_noise, state = buffer.sample_all()
            bs = 2 ** 10
            value = torch.cat([self.cri_target(state[i:i + bs]) for i in range(0, state.size(0), bs)], dim=0)
            logprob = self.act.get_old_logprob(action, a_noise)
            pre_state = torch.as_tensor((self.state,), dtype=torch.float32, device=self.device)
            pre_r_sum = self.cri(pre_state).detach()
            r_sum, advantage = self.get_reward_sum(self, buf_len, reward, mask, value, pre_r_sum)
            self.adv_diag = (advantage, r_sum - value.squeeze(1), value.squeeze(1))
        return state, action, r_sum, logprob, advantage

    @staticmethod
    def get_reward_sum_raw(self, buf_len, buf_reward, buf_mask, buf_value, pre_r_sum):
        buf_r_sum = torch.empty(buf_len, dtype=torch.float32, device=self.device)
        for i in range(buf_len - 1, -1, -1):
            buf_r_sum[i] = buf_reward[i] + buf_mask[i] * pre_r_sum
            pre_r_sum = buf_r_sum[i]
        buf_advantage = buf_r_sum - (buf_mask * buf_value.squeeze(1))
        buf_advantage = (buf_advantage - buf_advantage.mean()) / (buf_advantage.std() + 1e-5)
        return buf_r_sum, buf_advantage

    @staticmethod
    def get_reward_sum_gae(self, buf_len, buf_reward, buf_mask, buf_value, pre_r_sum):
        buf_r_sum = torch.empty(buf_len, dtype=torch.float32, device=self.device)
        buf_advantage = torch.empty(buf_len, dtype=torch.float32, device=self.device)
        pre_advantage = 0
        for i in range(buf_len - 1, -1, -1):
            buf_r_sum[i] = buf_reward[i] + buf_mask[i] * pre_r_sum
            pre_r_sum = buf_r_sum[i]

            buf_advantage[i] = buf_reward[i] + buf_mask[i] * (pre_advantage - buf_value[i])
            pre_advantage = buf_value[i] + buf_advantage[i] * self.lambda_gae_adv
        buf_advantage = (buf_advantage - buf_advantage.mean()) / (buf_advantage.std() + 1e-5)
        return buf_r_sum, buf_advantage

    @staticmethod
    def optim_update(optimizer, objective):
        optimizer.zero_grad()
        objective.backward()
        optimizer.step()


class ReplayBuffer:
    def __init__(self, max_len, state_dim, action_dim, if_discrete):
        self.device = torch.device("cpu")
        self.max_len = max_len
        self.now_len = 0
        self.next_idx = 0
        self.if_full = False
        self.action_dim = 1 if if_discrete else action_dim
        other_dim = 1 + 1 + self.action_dim + action_dim
        self.buf_other = np.empty((max_len, other_dim), dtype=np.float32)
        self.buf_state = np.empty((max_len, state_dim), dtype=np.float32)

    def extend_buffer(self, state, other):
        size = len(other)
        next_idx = self.next_idx + size
        self.buf_state[self.next_idx:next_idx] = state
        self.buf_other[self.next_idx:next_idx] = other
        self.next_idx = next_idx

    def extend_buffer_from_list(self, trajectory_list):
        state_ary = np.array([item[0] for item in trajectory_list], dtype=np.float32)
        other_ary = np.array([item[1] for item in trajectory_list], dtype=np.float32)
        self.extend_buffer(state_ary, other_ary)

    def sample_all(self):
        all_other = torch.as_tensor(self.buf_other[:self.now_len], device=self.device)
        return (all_other[:, 0],
                all_other[:, 1],
                all_other[:, 2:2 + self.action_dim],
                all_other[:, 2 + self.action_dim:],
                torch.as_tensor(self.buf_state[:self.now_len], device=self.device))

    def update_now_len(self):
        self.now_len = self.max_len if self.if_full else self.next_idx

    def empty_buffer(self):
        self.next_idx = 0
        self.now_len = 0
        self.if_full = False


class PointMassEnv:
    """1-D reaching task: state (position, velocity, target), action = force in [-1, 1]."""
    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.state_dim, self.action_dim, self.if_discrete, self.max_step = 3, 1, False, 50

    def reset(self):
        self.t = 0
        self.pos, self.vel = self.rng.uniform(-1, 1), 0.0
        self.target = self.rng.uniform(-1, 1)
        return self._obs()

    def _obs(self):
        return np.array([self.pos, self.vel, self.target], dtype=np.float32)

    def step(self, action):
        a = float(np.clip(action[0], -1, 1))
        self.vel = 0.8 * self.vel + 0.1 * a
        self.pos = float(np.clip(self.pos + self.vel, -2, 2))
        self.t += 1
        reward = -abs(self.pos - self.target) - 0.05 * a * a
        return self._obs(), reward, self.t >= self.max_step, {}


def get_episode_return(env, act, device):
    episode_return = 0.0
    state = env.reset()
    for _ in range(env.max_step):
        s_tensor = torch.as_tensor((state,), device=device)
        action = act(s_tensor).detach().cpu().numpy()[0]
        state, reward, done, _ = env.step(action)
        episode_return += reward
        if done:
            break
    return episode_return


class Arguments:
    net_dim = 64
    batch_size = 128
    target_step = 1000
    repeat_times = 4
    learning_rate = 3e-4
    if_per_or_gae = True
    gamma = 0.97
    reward_scale = 1.0
    soft_update_tau = 2 ** -8
    rounds = 10
    eval_times = 8


def train_and_evaluate(args):
    env, env_eval = PointMassEnv(seed=0), PointMassEnv(seed=123)
    agent = AgentPPO()
    agent.init(args.net_dim, env.state_dim, env.action_dim, args.learning_rate, args.if_per_or_gae)
    buffer = ReplayBuffer(max_len=args.target_step + env.max_step, state_dim=env.state_dim,
                          action_dim=env.action_dim, if_discrete=env.if_discrete)
    agent.state = env.reset()
    total_step = 0
    for r in range(args.rounds):
        with torch.no_grad():
            trajectory_list = agent.explore_env(env, args.target_step, args.reward_scale, args.gamma)
        total_step += len(trajectory_list)
        buffer.extend_buffer_from_list(trajectory_list)
        obj_c, obj_a, logprob = agent.update_net(buffer, args.batch_size, args.repeat_times, args.soft_update_tau)
        adv, mc_adv, v = agent.adv_diag
        corr = float(np.corrcoef(adv.numpy(), mc_adv.numpy())[0, 1])
        corr_v = float(np.corrcoef(adv.numpy(), v.numpy())[0, 1])
        with torch.no_grad():
            returns = [get_episode_return(env_eval, agent.act, agent.device) for _ in range(args.eval_times)]
        print(f"step {total_step:6d}  avgR {np.mean(returns):8.3f}  objC {obj_c:7.4f}  objA {obj_a:7.4f}  "
              f"corr(adv, r_sum - V) {corr:6.3f}  corr(adv, V) {corr_v:6.3f}")


if __name__ == '__main__':
    train_and_evaluate(Arguments())
