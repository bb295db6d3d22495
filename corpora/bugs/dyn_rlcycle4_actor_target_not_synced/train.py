# Source: cyoon1729/RLcycle, Policy-Gradient-Methods/ddpg/ddpg.py (DDPGAgent), Policy-Gradient-Methods/ddpg/models.py (Critic, Actor), Policy-Gradient-Methods/ddpg/ddpg_test.py, Policy-Gradient-Methods/common/replay_buffers.py (BasicBuffer), Policy-Gradient-Methods/common/utils.py (mini_batch_train), commit cdf66cf28af165458cf08940baefe2b49f8d51c9
# Report: https://github.com/cyoon1729/RLcycle/issues/4
# DDPG on Pendulum as in ddpg_test.py: actor / critic with soft-updated target networks (tau 1e-2),
# replay buffer, Adam 1e-3 for both, gamma 0.99, batch 32, an update after every environment step.
# gym's Pendulum-v0 is reimplemented in numpy (same dynamics, reward and 200-step time limit); the
# hidden layers are shrunk from 1024/512/300 (critic) and 512/128 (actor) to 64/64/32 and 64/32.
import random
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

torch.manual_seed(0)
np.random.seed(0)
random.seed(0)
torch.set_num_threads(1)


class Box:
    def __init__(self, low, high):
        self.low, self.high = np.array(low, dtype=np.float32), np.array(high, dtype=np.float32)
        self.shape = self.low.shape


class PendulumEnv:
    def __init__(self, seed=0):
        self.max_speed, self.max_torque, self.dt, self.g, self.m, self.l = 8, 2.0, 0.05, 10.0, 1.0, 1.0
        self.action_space = Box([-self.max_torque], [self.max_torque])
        self.observation_space = Box([-1.0, -1.0, -self.max_speed], [1.0, 1.0, self.max_speed])
        self.rng = np.random.RandomState(seed)
        self.t = 0

    def reset(self):
        self.state = self.rng.uniform(low=[-np.pi, -1.0], high=[np.pi, 1.0])
        self.t = 0
        return self._get_obs()

    def _get_obs(self):
        th, thdot = self.state
        return np.array([np.cos(th), np.sin(th), thdot], dtype=np.float32)

    def step(self, u):
        th, thdot = self.state
        u = np.clip(u, -self.max_torque, self.max_torque)[0]
        costs = (((th + np.pi) % (2 * np.pi)) - np.pi) ** 2 + .1 * thdot ** 2 + .001 * (u ** 2)
        newthdot = thdot + (-3 * self.g / (2 * self.l) * np.sin(th + np.pi) + 3. / (self.m * self.l ** 2) * u) * self.dt
        newth = th + newthdot * self.dt
        newthdot = np.clip(newthdot, -self.max_speed, self.max_speed)
        self.state = np.array([newth, newthdot])
        self.t += 1
        return self._get_obs(), -costs, self.t >= 200, {}


class Critic(nn.Module):

    def __init__(self, obs_dim, action_dim):
        super(Critic, self).__init__()

        self.obs_dim = obs_dim
        self.action_dim = action_dim

        self.linear1 = nn.Linear(self.obs_dim, 64)
        self.linear2 = nn.Linear(64 + self.action_dim, 64)
        self.linear3 = nn.Linear(64, 32)
        self.linear4 = nn.Linear(32, 1)

    def forward(self, x, a):
        x = F.relu(self.linear1(x))
        xa_cat = torch.cat([x, a], 1)
        xa = F.relu(self.linear2(xa_cat))
        xa = F.relu(self.linear3(xa))
        qval = self.linear4(xa)

        return qval


class Actor(nn.Module):

    def __init__(self, obs_dim, action_dim):
        super(Actor, self).__init__()

        self.obs_dim = obs_dim
        self.action_dim = action_dim

        self.linear1 = nn.Linear(self.obs_dim, 64)
        self.linear2 = nn.Linear(64, 32)
        self.linear3 = nn.Linear(32, self.action_dim)

    def forward(self, obs):
        x = F.relu(self.linear1(obs))
        x = F.relu(self.linear2(x))
        x = torch.tanh(self.linear3(x))

        return x


class BasicBuffer:

    def __init__(self, max_size):
        self.max_size = max_size
        self.buffer = deque(maxlen=max_size)

    def push(self, state, action, reward, next_state, done):
        experience = (state, action, np.array([reward]), next_state, done)
        self.buffer.append(experience)

    def sample(self, batch_size):
        state_batch = []
        action_batch = []
        reward_batch = []
        next_state_batch = []
        done_batch = []

        batch = random.sample(self.buffer, batch_size)

        for experience in batch:
            state, action, reward, next_state, done = experience
            state_batch.append(state)
            action_batch.append(action)
            reward_batch.append(reward)
            next_state_batch.append(next_state)
            done_batch.append(done)

        return (state_batch, action_batch, reward_batch, next_state_batch, done_batch)

    def __len__(self):
        return len(self.buffer)


class DDPGAgent:

    def __init__(self, env, gamma, tau, buffer_maxlen, critic_learning_rate, actor_learning_rate):
        self.device = torch.device("cpu")

        self.env = env
        self.obs_dim = env.observation_space.shape[0]
        self.action_dim = env.action_space.shape[0]

        # hyperparameters
        self.env = env
        self.gamma = gamma
        self.tau = tau

        # initialize actor and critic networks
        self.critic = Critic(self.obs_dim, self.action_dim).to(self.device)
        self.critic_target = Critic(self.obs_dim, self.action_dim).to(self.device)

        self.actor = Actor(self.obs_dim, self.action_dim).to(self.device)
        self.actor_target = Actor(self.obs_dim, self.action_dim).to(self.device)

        # Copy critic target parameters
        for target_param, param in zip(self.critic_target.parameters(), self.critic.parameters()):
            target_param.data.copy_(param.data)

        # optimizers
        self.critic_optimizer = optim.Adam(self.critic.parameters(), lr=critic_learning_rate)
        self.actor_optimizer = optim.Adam(self.actor.parameters(), lr=actor_learning_rate)

        self.replay_buffer = BasicBuffer(buffer_maxlen)

    def get_action(self, obs):
        state = torch.FloatTensor(obs).unsqueeze(0).to(self.device)
        action = self.actor.forward(state)
        action = action.squeeze(0).cpu().detach().numpy()

        return action

    def update(self, batch_size):
        states, actions, rewards, next_states, _ = self.replay_buffer.sample(batch_size)
        state_batch, action_batch, reward_batch, next_state_batch, masks = self.replay_buffer.sample(batch_size)
        state_batch = torch.FloatTensor(np.array(state_batch)).to(self.device)
        action_batch = torch.FloatTensor(np.array(action_batch)).to(self.device)
        reward_batch = torch.FloatTensor(np.array(reward_batch)).to(self.device)
        next_state_batch = torch.FloatTensor(np.array(next_state_batch)).to(self.device)
        masks = torch.FloatTensor(np.array(masks)).to(self.device)

        curr_Q = self.critic.forward(state_batch, action_batch)
        next_actions = self.actor_target.forward(next_state_batch)
        next_Q = self.critic_target.forward(next_state_batch, next_actions.detach())
        expected_Q = reward_batch + self.gamma * next_Q

        # update critic
        q_loss = F.mse_loss(curr_Q, expected_Q.detach())

        self.critic_optimizer.zero_grad()
        q_loss.backward()
        self.critic_optimizer.step()

        # update actor
        policy_loss = -self.critic.forward(state_batch, self.actor.forward(state_batch)).mean()

        self.actor_optimizer.zero_grad()
        policy_loss.backward()
        self.actor_optimizer.step()

        # update target networks
        for target_param, param in zip(self.actor_target.parameters(), self.actor.parameters()):
            target_param.data.copy_(param.data * self.tau + target_param.data * (1.0 - self.tau))

        for target_param, param in zip(self.critic_target.parameters(), self.critic.parameters()):
            target_param.data.copy_(param.data * self.tau + target_param.data * (1.0 - self.tau))
        return q_loss.item()


def param_gap(a, b):
    return sum((p - q).pow(2).sum().item() for p, q in zip(a.parameters(), b.parameters())) ** 0.5


def mini_batch_train(env, agent, max_episodes, max_steps, batch_size):
    episode_rewards = []
    print(f"start: |actor_target - actor| {param_gap(agent.actor_target, agent.actor):.4f}")

    for episode in range(max_episodes):
        state = env.reset()
        episode_reward = 0
        q_losses = []

        for step in range(max_steps):
            action = agent.get_action(state)
            next_state, reward, done, _ = env.step(action)
            agent.replay_buffer.push(state, action, reward, next_state, done)
            episode_reward += reward

            if len(agent.replay_buffer) > batch_size:
                q_losses.append(agent.update(batch_size))

            if done or step == max_steps-1:
                episode_rewards.append(episode_reward)
                print(f"Episode {episode}: {episode_reward:.1f}  critic loss {np.mean(q_losses):.3f}  "
                      f"|actor_target - actor| {param_gap(agent.actor_target, agent.actor):.4f}")
                break

            state = next_state

    return episode_rewards


if __name__ == "__main__":
    env = PendulumEnv(seed=0)

    max_episodes = 8
    max_steps = 500
    batch_size = 32

    gamma = 0.99
    tau = 1e-2
    buffer_maxlen = 100000
    critic_lr = 1e-3
    actor_lr = 1e-3

    agent = DDPGAgent(env, gamma, tau, buffer_maxlen, critic_lr, actor_lr)
    episode_rewards = mini_batch_train(env, agent, max_episodes, max_steps, batch_size)
    print(f"mean reward of the last 4 episodes: {np.mean(episode_rewards[-4:]):.1f}")
