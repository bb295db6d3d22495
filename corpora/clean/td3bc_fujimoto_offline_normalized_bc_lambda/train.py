# Source: sfujim/TD3_BC, TD3_BC.py + utils.py + main.py, commit 8791ad7d7656cb8396f1b3ac8c37f170b2a2dd5f
# https://github.com/sfujim/TD3_BC
#
# Author's TD3+BC (offline RL): the TD3 critic/actor of the paper with a behaviour-cloning term in the actor
# loss, lambda = alpha / |Q|.mean().detach(), states normalised with the dataset mean/std, target networks
# deep-copied and Polyak-averaged through .data, delayed actor updates. No environment interaction while
# training: the replay buffer is filled once from a fixed dataset (convert_D4RL).
# Adaptation: gym/d4rl are not available, so hopper-medium is replaced by a 2-D point-reaching task with the
# old gym API (PointReachEnv) and a "medium" dataset collected here by a noisy, biased scripted controller;
# get_normalized_score uses the random/expert returns of this task. Hidden 256 -> 64, max_timesteps 1e6 ->
# 1500, eval_freq 5e3 -> 300; argparse -> constants; no result/model files.
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class _Box:
	def __init__(self, low, high, shape):
		self.low, self.high, self.shape = np.full(shape, low), np.full(shape, high), shape


class PointReachEnv:
	"""Stand-in for a MuJoCo task (old gym API): a 2-D point must move to a goal; dense reward -distance."""
	REF_MIN_SCORE, REF_MAX_SCORE = -50.0, -6.0

	def __init__(self):
		self.rng = np.random.RandomState(0)
		self.observation_space = _Box(-np.inf, np.inf, (4,))
		self.action_space = _Box(-1.0, 1.0, (2,))
		self._max_episode_steps = 40

	def seed(self, seed):
		self.rng = np.random.RandomState(seed)

	def reset(self):
		self.pos = self.rng.uniform(-1, 1, 2)
		self.goal = self.rng.uniform(-1, 1, 2)
		self.t = 0
		return np.concatenate([self.pos, self.goal]).astype(np.float32)

	def step(self, action):
		self.pos = np.clip(self.pos + 0.1 * np.clip(action, -1, 1), -1.5, 1.5)
		self.t += 1
		reward = -float(np.linalg.norm(self.pos - self.goal))
		done = self.t >= self._max_episode_steps
		return np.concatenate([self.pos, self.goal]).astype(np.float32), reward, done, {}

	def get_normalized_score(self, score):
		return (score - self.REF_MIN_SCORE) / (self.REF_MAX_SCORE - self.REF_MIN_SCORE)


def qlearning_dataset(env, n_episodes=250, seed=1):
	"""A 'medium' dataset: a scripted controller that overshoots, with Gaussian noise and random actions."""
	rng = np.random.RandomState(seed)
	obs, acts, next_obs, rews, terms = [], [], [], [], []
	for _ in range(n_episodes):
		state, done = env.reset(), False
		while not done:
			direction = state[2:] - state[:2]
			action = np.clip(6.0 * direction + rng.normal(0, 0.6, 2), -1, 1)
			if rng.rand() < 0.2:
				action = rng.uniform(-1, 1, 2)
			next_state, reward, done, _ = env.step(action)
			obs.append(state); acts.append(action); next_obs.append(next_state)
			rews.append(reward); terms.append(0.0)  # time-limit ends are not terminals
			state = next_state
	return {
		'observations': np.array(obs), 'actions': np.array(acts), 'next_observations': np.array(next_obs),
		'rewards': np.array(rews), 'terminals': np.array(terms),
	}


class ReplayBuffer(object):
	def __init__(self, state_dim, action_dim, max_size=int(1e6)):
		self.max_size = max_size
		self.ptr = 0
		self.size = 0

		self.state = np.zeros((max_size, state_dim))
		self.action = np.zeros((max_size, action_dim))
		self.next_state = np.zeros((max_size, state_dim))
		self.reward = np.zeros((max_size, 1))
		self.not_done = np.zeros((max_size, 1))

		self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

	def sample(self, batch_size):
		ind = np.random.randint(0, self.size, size=batch_size)

		return (
			torch.FloatTensor(self.state[ind]).to(self.device),
			torch.FloatTensor(self.action[ind]).to(self.device),
			torch.FloatTensor(self.next_state[ind]).to(self.device),
			torch.FloatTensor(self.reward[ind]).to(self.device),
			torch.FloatTensor(self.not_done[ind]).to(self.device)
		)

	def convert_D4RL(self, dataset):
		self.state = dataset['observations']
		self.action = dataset['actions']
		self.next_state = dataset['next_observations']
		self.reward = dataset['rewards'].reshape(-1,1)
		self.not_done = 1. - dataset['terminals'].reshape(-1,1)
		self.size = self.state.shape[0]

	def normalize_states(self, eps = 1e-3):
		mean = self.state.mean(0,keepdims=True)
		std = self.state.std(0,keepdims=True) + eps
		self.state = (self.state - mean)/std
		self.next_state = (self.next_state - mean)/std
		return mean, std


class Actor(nn.Module):
	def __init__(self, state_dim, action_dim, max_action):
		super(Actor, self).__init__()

		self.l1 = nn.Linear(state_dim, 64)
		self.l2 = nn.Linear(64, 64)
		self.l3 = nn.Linear(64, action_dim)

		self.max_action = max_action

	def forward(self, state):
		a = F.relu(self.l1(state))
		a = F.relu(self.l2(a))
		return self.max_action * torch.tanh(self.l3(a))


class Critic(nn.Module):
	def __init__(self, state_dim, action_dim):
		super(Critic, self).__init__()

		# Q1 architecture
		self.l1 = nn.Linear(state_dim + action_dim, 64)
		self.l2 = nn.Linear(64, 64)
		self.l3 = nn.Linear(64, 1)

		# Q2 architecture
		self.l4 = nn.Linear(state_dim + action_dim, 64)
		self.l5 = nn.Linear(64, 64)
		self.l6 = nn.Linear(64, 1)

	def forward(self, state, action):
		sa = torch.cat([state, action], 1)

		q1 = F.relu(self.l1(sa))
		q1 = F.relu(self.l2(q1))
		q1 = self.l3(q1)

		q2 = F.relu(self.l4(sa))
		q2 = F.relu(self.l5(q2))
		q2 = self.l6(q2)
		return q1, q2

	def Q1(self, state, action):
		sa = torch.cat([state, action], 1)

		q1 = F.relu(self.l1(sa))
		q1 = F.relu(self.l2(q1))
		q1 = self.l3(q1)
		return q1


class TD3_BC(object):
	def __init__(
		self,
		state_dim,
		action_dim,
		max_action,
		discount=0.99,
		tau=0.005,
		policy_noise=0.2,
		noise_clip=0.5,
		policy_freq=2,
		alpha=2.5,
	):

		self.actor = Actor(state_dim, action_dim, max_action).to(device)
		self.actor_target = copy.deepcopy(self.actor)
		self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=3e-4)

		self.critic = Critic(state_dim, action_dim).to(device)
		self.critic_target = copy.deepcopy(self.critic)
		self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=3e-4)

		self.max_action = max_action
		self.discount = discount
		self.tau = tau
		self.policy_noise = policy_noise
		self.noise_clip = noise_clip
		self.policy_freq = policy_freq
		self.alpha = alpha

		self.total_it = 0

	def select_action(self, state):
		state = torch.FloatTensor(state.reshape(1, -1)).to(device)
		return self.actor(state).cpu().data.numpy().flatten()

	def train(self, replay_buffer, batch_size=256):
		self.total_it += 1

		# Sample replay buffer
		state, action, next_state, reward, not_done = replay_buffer.sample(batch_size)

		with torch.no_grad():
			# Select action according to policy and add clipped noise
			noise = (
				torch.randn_like(action) * self.policy_noise
			).clamp(-self.noise_clip, self.noise_clip)

			next_action = (
				self.actor_target(next_state) + noise
			).clamp(-self.max_action, self.max_action)

			# Compute the target Q value
			target_Q1, target_Q2 = self.critic_target(next_state, next_action)
			target_Q = torch.min(target_Q1, target_Q2)
			target_Q = reward + not_done * self.discount * target_Q

		# Get current Q estimates
		current_Q1, current_Q2 = self.critic(state, action)

		# Compute critic loss
		critic_loss = F.mse_loss(current_Q1, target_Q) + F.mse_loss(current_Q2, target_Q)

		# Optimize the critic
		self.critic_optimizer.zero_grad()
		critic_loss.backward()
		self.critic_optimizer.step()

		# Delayed policy updates
		if self.total_it % self.policy_freq == 0:

			# Compute actor loss
			pi = self.actor(state)
			Q = self.critic.Q1(state, pi)
			lmbda = self.alpha/Q.abs().mean().detach()

			actor_loss = -lmbda * Q.mean() + F.mse_loss(pi, action)

			# Optimize the actor
			self.actor_optimizer.zero_grad()
			actor_loss.backward()
			self.actor_optimizer.step()

			# Update the frozen target models
			for param, target_param in zip(self.critic.parameters(), self.critic_target.parameters()):
				target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)

			for param, target_param in zip(self.actor.parameters(), self.actor_target.parameters()):
				target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)


# Runs policy for X episodes and returns D4RL score
# A fixed seed is used for the eval environment
def eval_policy(policy, seed, mean, std, seed_offset=100, eval_episodes=10):
	eval_env = PointReachEnv()
	eval_env.seed(seed + seed_offset)

	avg_reward = 0.
	for _ in range(eval_episodes):
		state, done = eval_env.reset(), False
		while not done:
			state = (np.array(state).reshape(1,-1) - mean)/std
			action = policy.select_action(state)
			state, reward, done, _ = eval_env.step(action)
			avg_reward += reward

	avg_reward /= eval_episodes
	d4rl_score = eval_env.get_normalized_score(avg_reward) * 100

	print(f"Evaluation over {eval_episodes} episodes: {avg_reward:.3f}, D4RL score: {d4rl_score:.3f}")
	return d4rl_score


def main():
	seed, eval_freq, max_timesteps, batch_size = 0, 300, 1500, 256
	env = PointReachEnv()

	# Set seeds
	env.seed(seed)
	torch.manual_seed(seed)
	np.random.seed(seed)

	state_dim = env.observation_space.shape[0]
	action_dim = env.action_space.shape[0]
	max_action = float(env.action_space.high[0])

	kwargs = {
		"state_dim": state_dim,
		"action_dim": action_dim,
		"max_action": max_action,
		"discount": 0.99,
		"tau": 0.005,
		# TD3
		"policy_noise": 0.2 * max_action,
		"noise_clip": 0.5 * max_action,
		"policy_freq": 2,
		# TD3 + BC
		"alpha": 2.5
	}

	policy = TD3_BC(**kwargs)

	replay_buffer = ReplayBuffer(state_dim, action_dim)
	replay_buffer.convert_D4RL(qlearning_dataset(env))
	mean, std = replay_buffer.normalize_states()

	evaluations = [eval_policy(policy, seed, mean, std)]
	for t in range(int(max_timesteps)):
		policy.train(replay_buffer, batch_size)
		# Evaluate episode
		if (t + 1) % eval_freq == 0:
			print(f"Time steps: {t+1}")
			evaluations.append(eval_policy(policy, seed, mean, std))
	print(f"[summary] d4rl_score first={evaluations[0]:.3f} last={evaluations[-1]:.3f} "
		  f"increased={evaluations[-1] > evaluations[0]}")


if __name__ == "__main__":
	main()
