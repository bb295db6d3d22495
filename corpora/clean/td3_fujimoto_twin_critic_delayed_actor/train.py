# Source: sfujim/TD3, TD3.py + utils.py + main.py, commit 34770ccdcb51df6f6c7d85c1ba7e40d71b940d16
# https://github.com/sfujim/TD3
#
# Author's reference TD3: twin critics in ONE module/optimizer, target policy smoothing under no_grad, actor
# updated every policy_freq critic updates through critic.Q1 (its backward leaves gradients on the critic that
# the next critic_optimizer.zero_grad() clears), deep-copied target networks Polyak-updated through .data.
# Adaptation: gym/MuJoCo are not available, so HalfCheetah is replaced by a small 2-D point-reaching task with
# the old gym API (PointReachEnv below: reset() -> state, step() -> 4-tuple, _max_episode_steps, action_space);
# hidden width 256 -> 64, start_timesteps 25e3 -> 400, max_timesteps 1e6 -> 2400, eval_freq 5e3 -> 400,
# batch 256 -> 100; argparse -> constants; results/models files are not written; eval_env.seed -> seed arg.
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class _Box:
	def __init__(self, low, high, shape, rng):
		self.low, self.high, self.shape, self._rng = np.full(shape, low), np.full(shape, high), shape, rng

	def sample(self):
		return self._rng.uniform(self.low, self.high).astype(np.float32)


class PointReachEnv:
	"""Stand-in for a MuJoCo task (old gym API): a 2-D point must move to a goal; dense reward -distance."""

	def __init__(self, seed=0):
		self.rng = np.random.RandomState(seed)
		self.observation_space = _Box(-np.inf, np.inf, (4,), self.rng)
		self.action_space = _Box(-1.0, 1.0, (2,), self.rng)
		self._max_episode_steps = 40

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


	def add(self, state, action, next_state, reward, done):
		self.state[self.ptr] = state
		self.action[self.ptr] = action
		self.next_state[self.ptr] = next_state
		self.reward[self.ptr] = reward
		self.not_done[self.ptr] = 1. - done

		self.ptr = (self.ptr + 1) % self.max_size
		self.size = min(self.size + 1, self.max_size)


	def sample(self, batch_size):
		ind = np.random.randint(0, self.size, size=batch_size)

		return (
			torch.FloatTensor(self.state[ind]).to(self.device),
			torch.FloatTensor(self.action[ind]).to(self.device),
			torch.FloatTensor(self.next_state[ind]).to(self.device),
			torch.FloatTensor(self.reward[ind]).to(self.device),
			torch.FloatTensor(self.not_done[ind]).to(self.device)
		)


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


class TD3(object):
	def __init__(
		self,
		state_dim,
		action_dim,
		max_action,
		discount=0.99,
		tau=0.005,
		policy_noise=0.2,
		noise_clip=0.5,
		policy_freq=2
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

			# Compute actor losse
			actor_loss = -self.critic.Q1(state, self.actor(state)).mean()

			# Optimize the actor
			self.actor_optimizer.zero_grad()
			actor_loss.backward()
			self.actor_optimizer.step()

			# Update the frozen target models
			for param, target_param in zip(self.critic.parameters(), self.critic_target.parameters()):
				target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)

			for param, target_param in zip(self.actor.parameters(), self.actor_target.parameters()):
				target_param.data.copy_(self.tau * param.data + (1 - self.tau) * target_param.data)


# Runs policy for X episodes and returns average reward
# A fixed seed is used for the eval environment
def eval_policy(policy, seed, eval_episodes=10):
	eval_env = PointReachEnv(seed + 100)
	avg_reward = 0.
	for _ in range(eval_episodes):
		state, done = eval_env.reset(), False
		while not done:
			action = policy.select_action(np.array(state))
			state, reward, done, _ = eval_env.step(action)
			avg_reward += reward
	avg_reward /= eval_episodes
	print(f"Evaluation over {eval_episodes} episodes: {avg_reward:.3f}")
	return avg_reward


def main():
	seed = 0
	start_timesteps, eval_freq, max_timesteps = 400, 400, 2400
	expl_noise, batch_size = 0.1, 100
	env = PointReachEnv(seed)
	torch.manual_seed(seed)
	np.random.seed(seed)

	state_dim = env.observation_space.shape[0]
	action_dim = env.action_space.shape[0]
	max_action = float(env.action_space.high[0])

	kwargs = {"state_dim": state_dim, "action_dim": action_dim, "max_action": max_action,
			  "discount": 0.99, "tau": 0.005}
	# Target policy smoothing is scaled wrt the action scale
	kwargs["policy_noise"] = 0.2 * max_action
	kwargs["noise_clip"] = 0.5 * max_action
	kwargs["policy_freq"] = 2
	policy = TD3(**kwargs)

	replay_buffer = ReplayBuffer(state_dim, action_dim, max_size=int(1e5))

	# Evaluate untrained policy
	evaluations = [eval_policy(policy, seed)]

	state, done = env.reset(), False
	episode_reward = 0
	episode_timesteps = 0
	episode_num = 0

	for t in range(int(max_timesteps)):

		episode_timesteps += 1

		# Select action randomly or according to policy
		if t < start_timesteps:
			action = env.action_space.sample()
		else:
			action = (
				policy.select_action(np.array(state))
				+ np.random.normal(0, max_action * expl_noise, size=action_dim)
			).clip(-max_action, max_action)

		# Perform action
		next_state, reward, done, _ = env.step(action)
		done_bool = float(done) if episode_timesteps < env._max_episode_steps else 0

		# Store data in replay buffer
		replay_buffer.add(state, action, next_state, reward, done_bool)

		state = next_state
		episode_reward += reward

		# Train agent after collecting sufficient data
		if t >= start_timesteps:
			policy.train(replay_buffer, batch_size)

		if done:
			state, done = env.reset(), False
			episode_reward = 0
			episode_timesteps = 0
			episode_num += 1

		# Evaluate episode
		if (t + 1) % eval_freq == 0:
			evaluations.append(eval_policy(policy, seed))

	print(f"[summary] eval_return first={evaluations[0]:.3f} last={evaluations[-1]:.3f} increased={evaluations[-1] > evaluations[0]}")


if __name__ == "__main__":
	main()
