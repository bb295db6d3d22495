# Source: facebookresearch/drqv2, drqv2.py + utils.py + replay_buffer.py + train.py, commit c0c650b76c6e5d22a7eb5f2edffd1440fe94f8ef
# https://github.com/facebookresearch/drqv2
#
# DrQ-v2 (online RL from pixels): random-shift augmentation through grid_sample, a conv encoder that has its
# own optimizer and is trained ONLY by the critic loss (encoder_opt and critic_opt step on one backward), the
# actor trained on obs.detach(), next_obs encoded under no_grad, twin Q with a hard-copied target Polyak-updated
# through .data, TruncatedNormal with a straight-through clamp (x - x.detach() + clamped.detach()), a linear
# exploration-std schedule, n-step returns from an episode replay buffer, uniform random actions while
# step < num_expl_steps.
# Adaptation: dm_control is not available, so the task is a small pixel "reacher": a 20x20 image of a dot
# (3 stacked frames) that the action moves; reward exp(-3 * distance to the centre) in [0, 1]. The on-disk
# replay loader with workers becomes an in-memory buffer with the same _sample(); hydra config -> a dict;
# image 84 -> 20 (pad 4 -> 2, repr_dim computed), hidden 1024 -> 64, feature 50 -> 32, batch 256 -> 48,
# lr 1e-4 -> 1e-3, discount 0.99 -> 0.9, num_seed_frames 4000 -> 200, num_expl_steps 2000 -> 200,
# 1200 train steps, eval every 300 steps with 5 episodes; no video, logger or snapshots.
import random
import re

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import distributions as pyd
from torch.distributions.utils import _standard_normal


# ----------------------------------------------------------------------------------------------- utils.py
class eval_mode:
    def __init__(self, *models):
        self.models = models

    def __enter__(self):
        self.prev_states = []
        for model in self.models:
            self.prev_states.append(model.training)
            model.train(False)

    def __exit__(self, *args):
        for model, state in zip(self.models, self.prev_states):
            model.train(state)
        return False


def set_seed_everywhere(seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def soft_update_params(net, target_net, tau):
    for param, target_param in zip(net.parameters(), target_net.parameters()):
        target_param.data.copy_(tau * param.data +
                                (1 - tau) * target_param.data)


def to_torch(xs, device):
    return tuple(torch.as_tensor(x, device=device) for x in xs)


def weight_init(m):
    if isinstance(m, nn.Linear):
        nn.init.orthogonal_(m.weight.data)
        if hasattr(m.bias, 'data'):
            m.bias.data.fill_(0.0)
    elif isinstance(m, nn.Conv2d) or isinstance(m, nn.ConvTranspose2d):
        gain = nn.init.calculate_gain('relu')
        nn.init.orthogonal_(m.weight.data, gain)
        if hasattr(m.bias, 'data'):
            m.bias.data.fill_(0.0)


class TruncatedNormal(pyd.Normal):
    def __init__(self, loc, scale, low=-1.0, high=1.0, eps=1e-6):
        super().__init__(loc, scale, validate_args=False)
        self.low = low
        self.high = high
        self.eps = eps

    def _clamp(self, x):
        clamped_x = torch.clamp(x, self.low + self.eps, self.high - self.eps)
        x = x - x.detach() + clamped_x.detach()
        return x

    def sample(self, clip=None, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        eps = _standard_normal(shape,
                               dtype=self.loc.dtype,
                               device=self.loc.device)
        eps *= self.scale
        if clip is not None:
            eps = torch.clamp(eps, -clip, clip)
        x = self.loc + eps
        return self._clamp(x)


def schedule(schdl, step):
    try:
        return float(schdl)
    except ValueError:
        match = re.match(r'linear\((.+),(.+),(.+)\)', schdl)
        if match:
            init, final, duration = [float(g) for g in match.groups()]
            mix = np.clip(step / duration, 0.0, 1.0)
            return (1.0 - mix) * init + mix * final
    raise NotImplementedError(schdl)


# ---------------------------------------------------------------------------------------------- drqv2.py
class RandomShiftsAug(nn.Module):
    def __init__(self, pad):
        super().__init__()
        self.pad = pad

    def forward(self, x):
        n, c, h, w = x.size()
        assert h == w
        padding = tuple([self.pad] * 4)
        x = F.pad(x, padding, 'replicate')
        eps = 1.0 / (h + 2 * self.pad)
        arange = torch.linspace(-1.0 + eps,
                                1.0 - eps,
                                h + 2 * self.pad,
                                device=x.device,
                                dtype=x.dtype)[:h]
        arange = arange.unsqueeze(0).repeat(h, 1).unsqueeze(2)
        base_grid = torch.cat([arange, arange.transpose(1, 0)], dim=2)
        base_grid = base_grid.unsqueeze(0).repeat(n, 1, 1, 1)

        shift = torch.randint(0,
                              2 * self.pad + 1,
                              size=(n, 1, 1, 2),
                              device=x.device,
                              dtype=x.dtype)
        shift *= 2.0 / (h + 2 * self.pad)

        grid = base_grid + shift
        return F.grid_sample(x,
                             grid,
                             padding_mode='zeros',
                             align_corners=False)


class Encoder(nn.Module):
    def __init__(self, obs_shape):
        super().__init__()

        assert len(obs_shape) == 3
        side = (obs_shape[1] - 3) // 2 + 1 - 6
        self.repr_dim = 32 * side * side

        self.convnet = nn.Sequential(nn.Conv2d(obs_shape[0], 32, 3, stride=2),
                                     nn.ReLU(), nn.Conv2d(32, 32, 3, stride=1),
                                     nn.ReLU(), nn.Conv2d(32, 32, 3, stride=1),
                                     nn.ReLU(), nn.Conv2d(32, 32, 3, stride=1),
                                     nn.ReLU())

        self.apply(weight_init)

    def forward(self, obs):
        obs = obs / 255.0 - 0.5
        h = self.convnet(obs)
        h = h.view(h.shape[0], -1)
        return h


class Actor(nn.Module):
    def __init__(self, repr_dim, action_shape, feature_dim, hidden_dim):
        super().__init__()

        self.trunk = nn.Sequential(nn.Linear(repr_dim, feature_dim),
                                   nn.LayerNorm(feature_dim), nn.Tanh())

        self.policy = nn.Sequential(nn.Linear(feature_dim, hidden_dim),
                                    nn.ReLU(inplace=True),
                                    nn.Linear(hidden_dim, hidden_dim),
                                    nn.ReLU(inplace=True),
                                    nn.Linear(hidden_dim, action_shape[0]))

        self.apply(weight_init)

    def forward(self, obs, std):
        h = self.trunk(obs)

        mu = self.policy(h)
        mu = torch.tanh(mu)
        std = torch.ones_like(mu) * std

        dist = TruncatedNormal(mu, std)
        return dist


class Critic(nn.Module):
    def __init__(self, repr_dim, action_shape, feature_dim, hidden_dim):
        super().__init__()

        self.trunk = nn.Sequential(nn.Linear(repr_dim, feature_dim),
                                   nn.LayerNorm(feature_dim), nn.Tanh())

        self.Q1 = nn.Sequential(
            nn.Linear(feature_dim + action_shape[0], hidden_dim),
            nn.ReLU(inplace=True), nn.Linear(hidden_dim, hidden_dim),
            nn.ReLU(inplace=True), nn.Linear(hidden_dim, 1))

        self.Q2 = nn.Sequential(
            nn.Linear(feature_dim + action_shape[0], hidden_dim),
            nn.ReLU(inplace=True), nn.Linear(hidden_dim, hidden_dim),
            nn.ReLU(inplace=True), nn.Linear(hidden_dim, 1))

        self.apply(weight_init)

    def forward(self, obs, action):
        h = self.trunk(obs)
        h_action = torch.cat([h, action], dim=-1)
        q1 = self.Q1(h_action)
        q2 = self.Q2(h_action)

        return q1, q2


class DrQV2Agent:
    def __init__(self, obs_shape, action_shape, device, lr, feature_dim,
                 hidden_dim, critic_target_tau, num_expl_steps,
                 update_every_steps, stddev_schedule, stddev_clip, use_tb):
        self.device = device
        self.critic_target_tau = critic_target_tau
        self.update_every_steps = update_every_steps
        self.use_tb = use_tb
        self.num_expl_steps = num_expl_steps
        self.stddev_schedule = stddev_schedule
        self.stddev_clip = stddev_clip

        # models
        self.encoder = Encoder(obs_shape).to(device)
        self.actor = Actor(self.encoder.repr_dim, action_shape, feature_dim,
                           hidden_dim).to(device)

        self.critic = Critic(self.encoder.repr_dim, action_shape, feature_dim,
                             hidden_dim).to(device)
        self.critic_target = Critic(self.encoder.repr_dim, action_shape,
                                    feature_dim, hidden_dim).to(device)
        self.critic_target.load_state_dict(self.critic.state_dict())

        # optimizers
        self.encoder_opt = torch.optim.Adam(self.encoder.parameters(), lr=lr)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=lr)

        # data augmentation
        self.aug = RandomShiftsAug(pad=2)

        self.train()
        self.critic_target.train()

    def train(self, training=True):
        self.training = training
        self.encoder.train(training)
        self.actor.train(training)
        self.critic.train(training)

    def act(self, obs, step, eval_mode):
        obs = torch.as_tensor(obs, device=self.device)
        obs = self.encoder(obs.unsqueeze(0))
        stddev = schedule(self.stddev_schedule, step)
        dist = self.actor(obs, stddev)
        if eval_mode:
            action = dist.mean
        else:
            action = dist.sample(clip=None)
            if step < self.num_expl_steps:
                action.uniform_(-1.0, 1.0)
        return action.cpu().numpy()[0]

    def update_critic(self, obs, action, reward, discount, next_obs, step):
        metrics = dict()

        with torch.no_grad():
            stddev = schedule(self.stddev_schedule, step)
            dist = self.actor(next_obs, stddev)
            next_action = dist.sample(clip=self.stddev_clip)
            target_Q1, target_Q2 = self.critic_target(next_obs, next_action)
            target_V = torch.min(target_Q1, target_Q2)
            target_Q = reward + (discount * target_V)

        Q1, Q2 = self.critic(obs, action)
        critic_loss = F.mse_loss(Q1, target_Q) + F.mse_loss(Q2, target_Q)

        if self.use_tb:
            metrics['critic_loss'] = critic_loss.item()

        # optimize encoder and critic
        self.encoder_opt.zero_grad(set_to_none=True)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()
        self.encoder_opt.step()

        return metrics

    def update_actor(self, obs, step):
        metrics = dict()

        stddev = schedule(self.stddev_schedule, step)
        dist = self.actor(obs, stddev)
        action = dist.sample(clip=self.stddev_clip)
        log_prob = dist.log_prob(action).sum(-1, keepdim=True)
        Q1, Q2 = self.critic(obs, action)
        Q = torch.min(Q1, Q2)

        actor_loss = -Q.mean()

        # optimize actor
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()

        if self.use_tb:
            metrics['actor_loss'] = actor_loss.item()
            metrics['actor_logprob'] = log_prob.mean().item()

        return metrics

    def update(self, replay_iter, step):
        metrics = dict()

        if step % self.update_every_steps != 0:
            return metrics

        batch = next(replay_iter)
        obs, action, reward, discount, next_obs = to_torch(
            batch, self.device)

        # augment
        obs = self.aug(obs.float())
        next_obs = self.aug(next_obs.float())
        # encode
        obs = self.encoder(obs)
        with torch.no_grad():
            next_obs = self.encoder(next_obs)

        # update critic
        metrics.update(
            self.update_critic(obs, action, reward, discount, next_obs, step))

        # update actor
        metrics.update(self.update_actor(obs.detach(), step))

        # update critic target
        soft_update_params(self.critic, self.critic_target,
                           self.critic_target_tau)

        return metrics


# ------------------------------------------------------------------------- environment + replay_buffer.py
class TimeStep:
    def __init__(self, observation, action, reward, discount, last):
        self.observation, self.action, self.reward, self.discount, self._last = (
            observation, action, reward, discount, last)

    def last(self):
        return self._last


class PixelReacher:
    """dm_control stand-in: a dot on a 20x20 image (3 stacked frames) moved by a 2-D action toward the centre."""

    def __init__(self, seed, size=20, frame_stack=3, episode_len=25):
        self.rng = np.random.RandomState(seed)
        self.size, self.frame_stack, self.episode_len = size, frame_stack, episode_len
        grid = np.linspace(-1.2, 1.2, size)
        self.gx, self.gy = np.meshgrid(grid, grid)

    def _render(self):
        img = np.exp(-((self.gx - self.pos[0]) ** 2 + (self.gy - self.pos[1]) ** 2) / 0.02)
        return (255 * img).astype(np.uint8)

    def _obs(self):
        return np.stack(list(self.frames), 0)

    def reset(self):
        self.pos = self.rng.uniform(-1, 1, 2)
        self.t = 0
        self.frames = [self._render()] * self.frame_stack
        return TimeStep(self._obs(), np.zeros(2, np.float32), 0.0, 1.0, False)

    def step(self, action):
        self.pos = np.clip(self.pos + 0.15 * np.clip(action, -1, 1), -1.0, 1.0)
        self.t += 1
        self.frames = self.frames[1:] + [self._render()]
        reward = float(np.exp(-3.0 * np.linalg.norm(self.pos)))
        return TimeStep(self._obs(), action.astype(np.float32), reward, 1.0, self.t >= self.episode_len)


def episode_len(episode):
    # subtract -1 because the dummy first transition
    return next(iter(episode.values())).shape[0] - 1


class ReplayBuffer:
    """In-memory replay_buffer.ReplayStorage + ReplayBuffer: whole episodes, the same n-step _sample()."""

    def __init__(self, nstep, discount, batch_size):
        self._episodes, self._current = [], None
        self._nstep, self._discount, self._batch_size = nstep, discount, batch_size

    def add(self, time_step):
        if self._current is None:
            self._current = {'observation': [], 'action': [], 'reward': [], 'discount': []}
        self._current['observation'].append(time_step.observation)
        self._current['action'].append(time_step.action)
        self._current['reward'].append(np.full((1,), time_step.reward, np.float32))
        self._current['discount'].append(np.full((1,), time_step.discount, np.float32))
        if time_step.last():
            self._episodes.append({k: np.stack(v) for k, v in self._current.items()})
            self._current = None

    def __len__(self):
        return sum(episode_len(e) for e in self._episodes)

    def _sample(self):
        episode = random.choice(self._episodes)
        # add +1 for the first dummy transition
        idx = np.random.randint(0, episode_len(episode) - self._nstep + 1) + 1
        obs = episode['observation'][idx - 1]
        action = episode['action'][idx]
        next_obs = episode['observation'][idx + self._nstep - 1]
        reward = np.zeros_like(episode['reward'][idx])
        discount = np.ones_like(episode['discount'][idx])
        for i in range(self._nstep):
            step_reward = episode['reward'][idx + i]
            reward += discount * step_reward
            discount *= episode['discount'][idx + i] * self._discount
        return (obs, action, reward, discount, next_obs)

    def __iter__(self):
        while True:
            samples = [self._sample() for _ in range(self._batch_size)]
            yield tuple(np.stack(x) for x in zip(*samples))


# ---------------------------------------------------------------------------------------------- train.py
cfg = dict(seed=1, discount=0.9, nstep=3, batch_size=48, num_seed_frames=200, num_train_frames=1200,
           eval_every_frames=300, num_eval_episodes=5, lr=1e-3, feature_dim=32, hidden_dim=64,
           critic_target_tau=0.01, update_every_steps=2, num_expl_steps=200,
           stddev_schedule='linear(1.0,0.1,1000)', stddev_clip=0.3)


def evaluate(agent, eval_env, global_step):
    step, episode, total_reward = 0, 0, 0
    while episode < cfg['num_eval_episodes']:
        time_step = eval_env.reset()
        while not time_step.last():
            with torch.no_grad(), eval_mode(agent):
                action = agent.act(time_step.observation, global_step, eval_mode=True)
            time_step = eval_env.step(action)
            total_reward += time_step.reward
            step += 1
        episode += 1
    episode_reward = total_reward / episode
    print(f"| eval | frame {global_step:5d} | episode_reward {episode_reward:.3f}")
    return episode_reward


def main():
    set_seed_everywhere(cfg['seed'])
    device = torch.device('cpu')
    train_env, eval_env = PixelReacher(cfg['seed']), PixelReacher(cfg['seed'] + 100)
    agent = DrQV2Agent((3, 20, 20), (2,), device, cfg['lr'], cfg['feature_dim'], cfg['hidden_dim'],
                       cfg['critic_target_tau'], cfg['num_expl_steps'], cfg['update_every_steps'],
                       cfg['stddev_schedule'], cfg['stddev_clip'], use_tb=True)
    replay_storage = ReplayBuffer(cfg['nstep'], cfg['discount'], cfg['batch_size'])
    replay_iter = iter(replay_storage)

    evals = []
    global_step, episode_reward = 0, 0
    time_step = train_env.reset()
    replay_storage.add(time_step)
    while global_step < cfg['num_train_frames']:
        if time_step.last():
            time_step = train_env.reset()
            replay_storage.add(time_step)
            episode_reward = 0

        # try to evaluate
        if global_step % cfg['eval_every_frames'] == 0:
            evals.append(evaluate(agent, eval_env, global_step))

        # sample action
        with torch.no_grad(), eval_mode(agent):
            action = agent.act(time_step.observation, global_step, eval_mode=False)

        # try to update the agent
        if global_step >= cfg['num_seed_frames']:
            agent.update(replay_iter, global_step)

        # take env step
        time_step = train_env.step(action)
        episode_reward += time_step.reward
        replay_storage.add(time_step)
        global_step += 1
    evals.append(evaluate(agent, eval_env, global_step))
    print(f"[summary] eval episode_reward first={evals[0]:.3f} last={evals[-1]:.3f} increased={evals[-1] > evals[0]}")


if __name__ == '__main__':
    main()
