# Source: vietnh1009/Super-mario-bros-PPO-pytorch, train.py (train), src/model.py (PPO), src/env.py (MultipleEnvironments), commit ab4248d715346c6adc33c2157455e2b98c130bcc
# Report: https://github.com/vietnh1009/Super-mario-bros-PPO-pytorch/issues/21
# PPO with GAE over rollouts from several environments that reset themselves when an episode
# ends (so a rollout strings several episodes together), clipped surrogate, smooth-L1 critic,
# entropy bonus, gradient clipping. The Super Mario Bros emulator and its worker processes are
# replaced by a small in-process corridor game (walk right to the flag; a pit on the way ends
# the episode with a penalty), the conv net on 84x84 frames by an MLP on the state vector.
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical


class Corridor:
    """Positions 0..9, flag at 9 (+1, episode ends). Actions: 0 = walk, 1 = jump, 2 = wait.
    Walking onto a pit square (3 or 6) ends the episode with -1; jumping crosses two squares;
    every step costs 0.01; an episode ends after 30 steps."""
    num_states, num_actions = 12, 3

    def __init__(self, seed):
        self.rng = np.random.RandomState(seed)
        self.reset()

    def obs(self):
        o = np.zeros(self.num_states, dtype=np.float32)
        o[self.pos] = 1.0
        o[10] = float(self.pos + 1 in (3, 6))
        o[11] = self.t / 30.0
        return o[None]

    def reset(self):
        self.pos, self.t = 0, 0
        return self.obs()

    def step(self, action):
        self.t += 1
        reward, done = -0.01, False
        if action == 0:
            self.pos += 1
            if self.pos in (3, 6):
                reward, done = -1.0, True
        elif action == 1:
            self.pos = min(self.pos + 2, 9)
        if self.pos >= 9:
            reward, done = 1.0, True
        if self.t >= 30:
            done = True
        info = {"flag": self.pos >= 9, "pit": reward == -1.0}
        obs = self.obs()
        if done:
            obs = self.reset()
        return obs, reward, done, info


class MultipleEnvironments:
    def __init__(self, num_envs):
        self.envs = [Corridor(seed) for seed in range(num_envs)]
        self.num_states = Corridor.num_states
        self.num_actions = Corridor.num_actions


class PPO(nn.Module):
    def __init__(self, num_inputs, num_actions):
        super(PPO, self).__init__()
        self.linear1 = nn.Linear(num_inputs, 64)
        self.linear = nn.Linear(64, 64)
        self.critic_linear = nn.Linear(64, 1)
        self.actor_linear = nn.Linear(64, num_actions)
        self._initialize_weights()

    def _initialize_weights(self):
        for module in self.modules():
            if isinstance(module, nn.Conv2d) or isinstance(module, nn.Linear):
                nn.init.orthogonal_(module.weight, nn.init.calculate_gain('relu'))
                nn.init.constant_(module.bias, 0)

    def forward(self, x):
        x = F.relu(self.linear1(x))
        x = self.linear(x)
        return self.actor_linear(x), self.critic_linear(x)


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument('--lr', type=float, default=1e-3)
    parser.add_argument('--gamma', type=float, default=0.9, help='discount factor for rewards')
    parser.add_argument('--tau', type=float, default=1.0, help='parameter for GAE')
    parser.add_argument('--beta', type=float, default=0.01, help='entropy coefficient')
    parser.add_argument('--epsilon', type=float, default=0.2, help='parameter for Clipped Surrogate Objective')
    parser.add_argument('--batch_size', type=int, default=4)
    parser.add_argument('--num_epochs', type=int, default=4)
    parser.add_argument("--num_local_steps", type=int, default=64)
    parser.add_argument("--num_processes", type=int, default=8)
    parser.add_argument("--num_episodes", type=int, default=25)
    return parser.parse_args()


def train(opt):
    torch.manual_seed(123)
    np.random.seed(123)
    torch.set_num_threads(1)
    envs = MultipleEnvironments(opt.num_processes)
    model = PPO(envs.num_states, envs.num_actions)
    optimizer = torch.optim.Adam(model.parameters(), lr=opt.lr)
    curr_states = [env.reset() for env in envs.envs]
    curr_states = torch.from_numpy(np.concatenate(curr_states, 0))
    curr_episode = 0
    while curr_episode < opt.num_episodes:
        curr_episode += 1
        old_log_policies = []
        actions = []
        values = []
        states = []
        rewards = []
        dones = []
        flags = pits = 0
        for _ in range(opt.num_local_steps):
            states.append(curr_states)
            logits, value = model(curr_states)
            values.append(value.squeeze())
            policy = F.softmax(logits, dim=1)
            old_m = Categorical(policy)
            action = old_m.sample()
            actions.append(action)
            old_log_policy = old_m.log_prob(action)
            old_log_policies.append(old_log_policy)

            state, reward, done, info = zip(*[env.step(int(act)) for env, act in zip(envs.envs, action)])
            flags += sum(i["flag"] for i in info)
            pits += sum(i["pit"] for i in info)
            state = torch.from_numpy(np.concatenate(state, 0))
            reward = torch.FloatTensor(reward)
            done = torch.FloatTensor(done)
            rewards.append(reward)
            dones.append(done)
            curr_states = state

        _, next_value, = model(curr_states)
        next_value = next_value.squeeze()
        old_log_policies = torch.cat(old_log_policies).detach()
        actions = torch.cat(actions)
        values = torch.cat(values).detach()
        states = torch.cat(states)
        gae = 0
        R = []
        for value, reward, done in list(zip(values, rewards, dones))[::-1]:
            gae = gae * opt.gamma * opt.tau
            gae = gae + reward + opt.gamma * next_value.detach() * (1 - done) - value.detach()
            next_value = value
            R.append(gae + value)
        R = R[::-1]
        R = torch.cat(R).detach()
        advantages = R - values
        done_mask = torch.cat(dones).bool()
        pit_mask = done_mask & (torch.cat(rewards) == -1.0)
        for i in range(opt.num_epochs):
            indice = torch.randperm(opt.num_local_steps * opt.num_processes)
            for j in range(opt.batch_size):
                batch_indices = indice[
                                int(j * (opt.num_local_steps * opt.num_processes / opt.batch_size)): int((j + 1) * (
                                        opt.num_local_steps * opt.num_processes / opt.batch_size))]
                logits, value = model(states[batch_indices])
                new_policy = F.softmax(logits, dim=1)
                new_m = Categorical(new_policy)
                new_log_policy = new_m.log_prob(actions[batch_indices])
                ratio = torch.exp(new_log_policy - old_log_policies[batch_indices])
                actor_loss = -torch.mean(torch.min(ratio * advantages[batch_indices],
                                                   torch.clamp(ratio, 1.0 - opt.epsilon, 1.0 + opt.epsilon) *
                                                   advantages[
                                                       batch_indices]))
                critic_loss = F.smooth_l1_loss(R[batch_indices], value.squeeze())
                entropy_loss = torch.mean(new_m.entropy())
                total_loss = actor_loss + critic_loss - opt.beta * entropy_loss
                optimizer.zero_grad()
                total_loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                optimizer.step()
        if curr_episode % 5 == 0 or curr_episode == 1:
            print("Episode: {}. Total loss: {:.4f}. flags {} pits {} | mean advantage of pit steps {:.3f}".format(
                curr_episode, total_loss.item(), flags, pits,
                advantages[pit_mask].mean().item() if pit_mask.any() else float('nan')))


if __name__ == "__main__":
    opt = get_args()
    train(opt)
