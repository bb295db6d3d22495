# Source: higgsfield/RL-Adventure, 2.double dqn.ipynb, commit 47e337d9b9513ec1ae777d7f0a357e8f42902676
# https://github.com/higgsfield/RL-Adventure
#
# Double DQN on CartPole (notebook cells in order): deque replay buffer sampled with random.sample,
# exponentially decaying epsilon-greedy, current_model / target_model with the target synced by
# load_state_dict every 100 frames, TD target built from target_model values at the action chosen by
# current_model (argmax) and detached by re-wrapping .data in a Variable, (1 - done) masking, squared TD
# error, one Adam step per environment frame once the buffer holds more than a batch.
# Adaptation: gym CartPole-v0 -> the same cart-pole dynamics written in numpy (CartPoleEnv equations,
# 200-step limit, reward 1 per step); Variable(volatile=True) in act -> torch.no_grad(); loss.data[0] ->
# loss.item(); num_frames 10000 -> 4000; matplotlib plotting -> a printed line every 500 frames with the
# mean reward of the last 10 episodes; seeds fixed; cpu.
import math
import random
from collections import deque

import numpy as np
import torch
import torch.autograd as autograd
import torch.nn as nn
import torch.optim as optim

USE_CUDA = False
Variable = lambda *args, **kwargs: autograd.Variable(*args, **kwargs).cuda() if USE_CUDA else autograd.Variable(*args, **kwargs)


class CartPoleEnv(object):
    """gym's classic_control CartPoleEnv, without rendering"""
    def __init__(self, seed=0):
        self.gravity, self.masscart, self.masspole, self.length = 9.8, 1.0, 0.1, 0.5
        self.total_mass = self.masspole + self.masscart
        self.polemass_length = self.masspole * self.length
        self.force_mag, self.tau = 10.0, 0.02
        self.theta_threshold_radians = 12 * 2 * math.pi / 360
        self.x_threshold = 2.4
        self.rng = np.random.RandomState(seed)
        self.observation_space_shape = (4,)
        self.action_space_n = 2
        self.max_episode_steps = 200

    def reset(self):
        self.state = self.rng.uniform(low=-0.05, high=0.05, size=(4,))
        self.steps = 0
        return np.array(self.state, dtype=np.float32)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (force + self.polemass_length * theta_dot * theta_dot * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta * costheta / self.total_mass))
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        self.state = (x, x_dot, theta, theta_dot)
        self.steps += 1
        done = bool(x < -self.x_threshold or x > self.x_threshold
                    or theta < -self.theta_threshold_radians or theta > self.theta_threshold_radians
                    or self.steps >= self.max_episode_steps)
        return np.array(self.state, dtype=np.float32), 1.0, done, {}


class ReplayBuffer(object):
    def __init__(self, capacity):
        self.buffer = deque(maxlen=capacity)

    def push(self, state, action, reward, next_state, done):
        state      = np.expand_dims(state, 0)
        next_state = np.expand_dims(next_state, 0)

        self.buffer.append((state, action, reward, next_state, done))

    def sample(self, batch_size):
        state, action, reward, next_state, done = zip(*random.sample(self.buffer, batch_size))
        return np.concatenate(state), action, reward, np.concatenate(next_state), done

    def __len__(self):
        return len(self.buffer)


env = CartPoleEnv()

epsilon_start = 1.0
epsilon_final = 0.01
epsilon_decay = 500

epsilon_by_frame = lambda frame_idx: epsilon_final + (epsilon_start - epsilon_final) * math.exp(-1. * frame_idx / epsilon_decay)


class DQN(nn.Module):
    def __init__(self, num_inputs, num_actions):
        super(DQN, self).__init__()

        self.layers = nn.Sequential(
            nn.Linear(env.observation_space_shape[0], 128),
            nn.ReLU(),
            nn.Linear(128, 128),
            nn.ReLU(),
            nn.Linear(128, env.action_space_n)
        )

    def forward(self, x):
        return self.layers(x)

    def act(self, state, epsilon):
        if random.random() > epsilon:
            with torch.no_grad():
                state   = Variable(torch.FloatTensor(state).unsqueeze(0))
                q_value = self.forward(state)
                action  = q_value.max(1)[1].item()
        else:
            action = random.randrange(env.action_space_n)
        return action


def update_target(current_model, target_model):
    target_model.load_state_dict(current_model.state_dict())


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)

    current_model = DQN(env.observation_space_shape[0], env.action_space_n)
    target_model  = DQN(env.observation_space_shape[0], env.action_space_n)

    optimizer = optim.Adam(current_model.parameters())

    replay_buffer = ReplayBuffer(1000)

    update_target(current_model, target_model)

    def compute_td_loss(batch_size):
        state, action, reward, next_state, done = replay_buffer.sample(batch_size)

        state      = Variable(torch.FloatTensor(np.float32(state)))
        next_state = Variable(torch.FloatTensor(np.float32(next_state)))
        action     = Variable(torch.LongTensor(action))
        reward     = Variable(torch.FloatTensor(reward))
        done       = Variable(torch.FloatTensor(done))

        q_values      = current_model(state)
        next_q_values = current_model(next_state)
        next_q_state_values = target_model(next_state)

        q_value       = q_values.gather(1, action.unsqueeze(1)).squeeze(1)
        next_q_value = next_q_state_values.gather(1, torch.max(next_q_values, 1)[1].unsqueeze(1)).squeeze(1)
        expected_q_value = reward + gamma * next_q_value * (1 - done)

        loss = (q_value - Variable(expected_q_value.data)).pow(2).mean()

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        return loss

    num_frames = 4000
    batch_size = 32
    gamma      = 0.99

    losses = []
    all_rewards = []
    episode_reward = 0

    state = env.reset()
    for frame_idx in range(1, num_frames + 1):
        epsilon = epsilon_by_frame(frame_idx)
        action = current_model.act(state, epsilon)

        next_state, reward, done, _ = env.step(action)
        replay_buffer.push(state, action, reward, next_state, done)

        state = next_state
        episode_reward += reward

        if done:
            state = env.reset()
            all_rewards.append(episode_reward)
            episode_reward = 0

        if len(replay_buffer) > batch_size:
            loss = compute_td_loss(batch_size)
            losses.append(loss.item())

        if frame_idx % 500 == 0:
            print('frame %s. reward: %s  episodes: %d  loss: %.4f  epsilon: %.3f' % (
                frame_idx, np.mean(all_rewards[-10:]), len(all_rewards), np.mean(losses[-500:]), epsilon))

        if frame_idx % 100 == 0:
            update_target(current_model, target_model)


if __name__ == "__main__":
    main()
