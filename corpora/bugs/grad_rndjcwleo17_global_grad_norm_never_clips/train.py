# Source: jcwleo/random-network-distillation-pytorch, agents.py (RNDAgent.train_model), utils.py (global_grad_norm_, make_train_data, RunningMeanStd, RewardForwardFilter), train.py, model.py, commit e383fb95177c50bfdcd81b43e37c443c8cde1d94
# Report: https://github.com/jcwleo/random-network-distillation-pytorch/issues/17
# PPO + Random Network Distillation: an actor-critic with extrinsic and intrinsic value heads,
# a fixed random target net and a trained predictor whose error is the intrinsic reward, one
# Adam over the policy and predictor, GAE targets for both reward streams, ClipGradNorm = 0.5.
# The Atari workers are replaced by a vectorised 1-D corridor (one-hot position, reward at the
# far end), the conv nets by MLPs, tensorboard by one printed line per rollout.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch import inf
from torch.distributions.categorical import Categorical

default_config = {"LearningRate": 1e-4, "NumEnv": 8, "NumStep": 32, "Gamma": 0.999, "IntGamma": 0.99,
                  "Lambda": 0.95, "ClipGradNorm": 0.5, "Entropy": 0.001, "Epoch": 4, "MiniBatch": 4,
                  "PPOEps": 0.1, "ExtCoef": 2., "IntCoef": 1., "UpdateProportion": 0.25}
use_gae = True
lam = default_config["Lambda"]


def make_train_data(reward, done, value, gamma, num_step, num_worker):
    discounted_return = np.empty([num_worker, num_step])
    if use_gae:
        gae = np.zeros_like([num_worker, ])
        for t in range(num_step - 1, -1, -1):
            delta = reward[:, t] + gamma * value[:, t + 1] * (1 - done[:, t]) - value[:, t]
            gae = delta + gamma * lam * (1 - done[:, t]) * gae
            discounted_return[:, t] = gae + value[:, t]
        adv = discounted_return - value[:, :-1]
    return discounted_return.reshape([-1]), adv.reshape([-1])


class RunningMeanStd(object):
    def __init__(self, epsilon=1e-4, shape=()):
        self.mean = np.zeros(shape, 'float64')
        self.var = np.ones(shape, 'float64')
        self.count = epsilon

    def update(self, x):
        self.update_from_moments(np.mean(x, axis=0), np.var(x, axis=0), x.shape[0])

    def update_from_moments(self, batch_mean, batch_var, batch_count):
        delta = batch_mean - self.mean
        tot_count = self.count + batch_count
        new_mean = self.mean + delta * batch_count / tot_count
        m_a = self.var * (self.count)
        m_b = batch_var * (batch_count)
        M2 = m_a + m_b + np.square(delta) * self.count * batch_count / (self.count + batch_count)
        self.mean = new_mean
        self.var = M2 / (self.count + batch_count)
        self.count = batch_count + self.count


class RewardForwardFilter(object):
    def __init__(self, gamma):
        self.rewems = None
        self.gamma = gamma

    def update(self, rews):
        if self.rewems is None:
            self.rewems = rews
        else:
            self.rewems = self.rewems * self.gamma + rews
        return self.rewems


def global_grad_norm_(parameters, norm_type=2):
    r"""Clips gradient norm of an iterable of parameters.

    The norm is computed over all gradients together, as if they were
    concatenated into a single vector. Gradients are modified in-place.
    """
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    parameters = list(filter(lambda p: p.grad is not None, parameters))
    norm_type = float(norm_type)
    if norm_type == inf:
        total_norm = max(p.grad.data.abs().max() for p in parameters)
    else:
        total_norm = 0
        for p in parameters:
            param_norm = p.grad.data.norm(norm_type)
            total_norm += param_norm.item() ** norm_type
        total_norm = total_norm ** (1. / norm_type)

    return total_norm


class ActorCriticNetwork(nn.Module):
    def __init__(self, input_size, output_size):
        super(ActorCriticNetwork, self).__init__()
        self.feature = nn.Sequential(nn.Linear(input_size, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.actor = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, output_size))
        self.extra_layer = nn.Sequential(nn.Linear(64, 64), nn.ReLU())
        self.critic_ext = nn.Linear(64, 1)
        self.critic_int = nn.Linear(64, 1)

    def forward(self, state):
        x = self.feature(state)
        policy = self.actor(x)
        value_ext = self.critic_ext(self.extra_layer(x) + x)
        value_int = self.critic_int(self.extra_layer(x) + x)
        return policy, value_ext, value_int


class RNDModel(nn.Module):
    def __init__(self, input_size, output_size):
        super(RNDModel, self).__init__()
        self.predictor = nn.Sequential(nn.Linear(input_size, 64), nn.LeakyReLU(), nn.Linear(64, 64), nn.ReLU(),
                                       nn.Linear(64, 32))
        self.target = nn.Sequential(nn.Linear(input_size, 64), nn.LeakyReLU(), nn.Linear(64, 32))
        for param in self.target.parameters():
            param.requires_grad = False

    def forward(self, next_obs):
        target_feature = self.target(next_obs)
        predict_feature = self.predictor(next_obs)
        return predict_feature, target_feature


class RNDAgent(object):
    def __init__(self, input_size, output_size, num_env, num_step, gamma, lam=0.95, learning_rate=1e-4,
                 ent_coef=0.01, clip_grad_norm=0.5, epoch=3, batch_size=128, ppo_eps=0.1, update_proportion=0.25,
                 use_gae=True):
        self.model = ActorCriticNetwork(input_size, output_size)
        self.num_env = num_env
        self.output_size = output_size
        self.input_size = input_size
        self.num_step = num_step
        self.gamma = gamma
        self.lam = lam
        self.epoch = epoch
        self.batch_size = batch_size
        self.use_gae = use_gae
        self.ent_coef = ent_coef
        self.ppo_eps = ppo_eps
        self.clip_grad_norm = clip_grad_norm
        self.update_proportion = update_proportion
        self.device = torch.device('cpu')

        self.rnd = RNDModel(input_size, output_size)
        self.optimizer = optim.Adam(list(self.model.parameters()) + list(self.rnd.predictor.parameters()),
                                    lr=learning_rate)
        self.grad_norms = []

    def get_action(self, state):
        state = torch.Tensor(state).to(self.device)
        policy, value_ext, value_int = self.model(state)
        action_prob = F.softmax(policy, dim=-1).data.cpu().numpy()
        action = self.random_choice_prob_index(action_prob)
        return action, value_ext.data.cpu().numpy().squeeze(), value_int.data.cpu().numpy().squeeze(), policy.detach()

    @staticmethod
    def random_choice_prob_index(p, axis=1):
        r = np.expand_dims(np.random.rand(p.shape[1 - axis]), axis=axis)
        return (p.cumsum(axis=axis) > r).argmax(axis=axis)

    def compute_intrinsic_reward(self, next_obs):
        next_obs = torch.FloatTensor(next_obs).to(self.device)
        target_next_feature = self.rnd.target(next_obs)
        predict_next_feature = self.rnd.predictor(next_obs)
        intrinsic_reward = (target_next_feature - predict_next_feature).pow(2).sum(1) / 2
        return intrinsic_reward.data.cpu().numpy()

    def train_model(self, s_batch, target_ext_batch, target_int_batch, y_batch, adv_batch, next_obs_batch, old_policy):
        s_batch = torch.FloatTensor(s_batch).to(self.device)
        target_ext_batch = torch.FloatTensor(target_ext_batch).to(self.device)
        target_int_batch = torch.FloatTensor(target_int_batch).to(self.device)
        y_batch = torch.LongTensor(y_batch).to(self.device)
        adv_batch = torch.FloatTensor(adv_batch).to(self.device)
        next_obs_batch = torch.FloatTensor(next_obs_batch).to(self.device)

        sample_range = np.arange(len(s_batch))
        forward_mse = nn.MSELoss(reduction='none')

        with torch.no_grad():
            policy_old_list = torch.stack(old_policy).permute(1, 0, 2).contiguous().view(-1, self.output_size).to(
                self.device)
            m_old = Categorical(F.softmax(policy_old_list, dim=-1))
            log_prob_old = m_old.log_prob(y_batch)

        for i in range(self.epoch):
            np.random.shuffle(sample_range)
            for j in range(int(len(s_batch) / self.batch_size)):
                sample_idx = sample_range[self.batch_size * j:self.batch_size * (j + 1)]

                # for Curiosity-driven(Random Network Distillation)
                predict_next_state_feature, target_next_state_feature = self.rnd(next_obs_batch[sample_idx])

                forward_loss = forward_mse(predict_next_state_feature, target_next_state_feature.detach()).mean(-1)
                # Proportion of exp used for predictor update
                mask = torch.rand(len(forward_loss)).to(self.device)
                mask = (mask < self.update_proportion).type(torch.FloatTensor).to(self.device)
                forward_loss = (forward_loss * mask).sum() / torch.max(mask.sum(), torch.Tensor([1]).to(self.device))

                policy, value_ext, value_int = self.model(s_batch[sample_idx])
                m = Categorical(F.softmax(policy, dim=-1))
                log_prob = m.log_prob(y_batch[sample_idx])

                ratio = torch.exp(log_prob - log_prob_old[sample_idx])

                surr1 = ratio * adv_batch[sample_idx]
                surr2 = torch.clamp(ratio, 1.0 - self.ppo_eps, 1.0 + self.ppo_eps) * adv_batch[sample_idx]

                actor_loss = -torch.min(surr1, surr2).mean()
                critic_ext_loss = F.mse_loss(value_ext.sum(1), target_ext_batch[sample_idx])
                critic_int_loss = F.mse_loss(value_int.sum(1), target_int_batch[sample_idx])

                critic_loss = critic_ext_loss + critic_int_loss

                entropy = m.entropy().mean()

                self.optimizer.zero_grad()
                loss = actor_loss + 0.5 * critic_loss - self.ent_coef * entropy + forward_loss
                loss.backward()
                global_grad_norm_(list(self.model.parameters())+list(self.rnd.predictor.parameters()))
                self.grad_norms.append(global_grad_norm_(list(self.model.parameters()) + list(self.rnd.predictor.parameters())))
                self.optimizer.step()


class CorridorEnvs(object):
    """num_env corridors of `length` cells; action 1 moves right, 0 left; reward 1 at the right end."""
    def __init__(self, num_env, length=24, max_step=60, seed=0):
        self.num_env, self.length, self.max_step = num_env, length, max_step
        self.rng = np.random.RandomState(seed)
        self.pos = np.zeros(num_env, dtype=int)
        self.t = np.zeros(num_env, dtype=int)

    def obs(self):
        o = np.zeros((self.num_env, self.length), dtype=np.float32)
        o[np.arange(self.num_env), self.pos] = 1.0
        return o

    def step(self, actions):
        self.pos = np.clip(self.pos + np.where(actions == 1, 1, -1), 0, self.length - 1)
        self.t += 1
        rewards = (self.pos == self.length - 1).astype(np.float32)
        dones = (rewards > 0) | (self.t >= self.max_step)
        self.pos[dones] = 0
        self.t[dones] = 0
        return self.obs(), rewards, dones.astype(np.float32)


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    cfg = default_config
    num_worker, num_step, output_size, input_size = cfg["NumEnv"], cfg["NumStep"], 2, 8
    gamma, int_gamma = cfg["Gamma"], cfg["IntGamma"]
    batch_size = int(num_step * num_worker / cfg["MiniBatch"])
    agent = RNDAgent(input_size, output_size, num_worker, num_step, gamma, lam=lam, learning_rate=cfg["LearningRate"],
                     ent_coef=cfg["Entropy"], clip_grad_norm=cfg["ClipGradNorm"], epoch=cfg["Epoch"],
                     batch_size=batch_size, ppo_eps=cfg["PPOEps"], update_proportion=cfg["UpdateProportion"])
    envs = CorridorEnvs(num_worker, length=input_size, max_step=40)
    reward_rms = RunningMeanStd()
    discounted_reward = RewardForwardFilter(int_gamma)
    states = envs.obs()

    for global_update in range(1, 31):
        total_state, total_reward, total_done, total_action, total_int_reward, total_next_obs = [], [], [], [], [], []
        total_ext_values, total_int_values, total_policy = [], [], []
        for _ in range(num_step):
            actions, value_ext, value_int, policy = agent.get_action(states)
            next_states, rewards, dones = envs.step(actions)
            intrinsic_reward = agent.compute_intrinsic_reward(next_states)
            total_next_obs.append(next_states)
            total_int_reward.append(intrinsic_reward)
            total_state.append(states)
            total_reward.append(rewards)
            total_done.append(dones)
            total_action.append(actions)
            total_ext_values.append(value_ext)
            total_int_values.append(value_int)
            total_policy.append(policy)
            states = next_states
        _, value_ext, value_int, _ = agent.get_action(states)
        total_ext_values.append(value_ext)
        total_int_values.append(value_int)

        total_state = np.stack(total_state).transpose([1, 0, 2]).reshape([-1, input_size])
        total_reward = np.stack(total_reward).transpose().clip(-1, 1)
        total_action = np.stack(total_action).transpose().reshape([-1])
        total_done = np.stack(total_done).transpose()
        total_next_obs = np.stack(total_next_obs).transpose([1, 0, 2]).reshape([-1, input_size])
        total_ext_values = np.stack(total_ext_values).transpose()
        total_int_values = np.stack(total_int_values).transpose()

        total_int_reward = np.stack(total_int_reward).transpose()
        total_reward_per_env = np.array([discounted_reward.update(reward_per_step) for reward_per_step in
                                         total_int_reward.T])
        mean, std, count = np.mean(total_reward_per_env), np.std(total_reward_per_env), len(total_reward_per_env)
        reward_rms.update_from_moments(mean, std ** 2, count)
        total_int_reward /= np.sqrt(reward_rms.var)

        ext_target, ext_adv = make_train_data(total_reward, total_done, total_ext_values, gamma, num_step, num_worker)
        int_target, int_adv = make_train_data(total_int_reward, np.zeros_like(total_int_reward), total_int_values,
                                              int_gamma, num_step, num_worker)
        total_adv = int_adv * cfg["IntCoef"] + ext_adv * cfg["ExtCoef"]

        agent.grad_norms = []
        agent.train_model(np.float32(total_state), ext_target, int_target, total_action, total_adv,
                          total_next_obs, total_policy)
        if global_update % 3 == 0:
            params = list(agent.model.parameters()) + list(agent.rnd.predictor.parameters())
            print(f"update {global_update}: ext reward/rollout {total_reward.sum() / num_worker:.3f} "
                  f"int reward mean {total_int_reward.mean():.4f} grad norm at optimizer.step mean {np.mean(agent.grad_norms):.3f} "
                  f"max {np.max(agent.grad_norms):.3f} (ClipGradNorm {cfg['ClipGradNorm']}) "
                  f"param norm {torch.sqrt(sum((p.detach() ** 2).sum() for p in params)).item():.4f}")


if __name__ == "__main__":
    main()
