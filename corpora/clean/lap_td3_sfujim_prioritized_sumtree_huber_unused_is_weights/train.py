# Source: sfujim/LAP-PAL, continuous/LAP_TD3.py, continuous/utils.py, continuous/main.py, commit a649b1b977e979ed0e49d67335d3c79b555e9cfb
# https://github.com/sfujim/LAP-PAL
#
# LAP-TD3 (Loss-Adjusted Prioritized experience replay, Fujimoto et al. 2020): transitions are sampled from a
# numpy sum-tree in proportion to max(|TD1|, |TD2|) clamped at min_priority=1 and raised to alpha=0.4; the sampled
# importance weights are returned by the buffer but NOT used (LAP's point: the Huber loss with threshold 1 replaces
# the IS correction); critic loss is Huber(|TD|) per head, .abs() before the piecewise quadratic/linear loss;
# the priorities are written back from .data numpy after the critic step; new transitions enter with the running
# max priority; TD3 delayed actor through critic.Q1, deep-copied targets updated with .data.copy_.
# Adaptation: gym/MuJoCo are not installed: HalfCheetah is replaced by a 2-D point-mass reaching task with the
# old gym API (state pos+vel, action = force in [-1, 1]^2, 50-step time limit, reward -distance), so every episode
# ends by the time limit and done_bool stays 0 (main.py's _max_episode_steps rule); hidden 256 -> 64,
# buffer 1e6 -> 1e5, start_timesteps 25e3 -> 500, max_timesteps 3e6 -> 3000, eval_freq 5e3 -> 500,
# batch 256 -> 100, argparse -> constants, results files dropped.
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

device = torch.device("cpu")


# ---------------------------------------------------------------- continuous/utils.py
class PrioritizedReplayBuffer():
	def __init__(self, state_dim, action_dim, max_size=int(1e5)):
		self.max_size = max_size
		self.ptr = 0
		self.size = 0

		self.state = np.zeros((max_size, state_dim))
		self.action = np.zeros((max_size, action_dim))
		self.next_state = np.zeros((max_size, state_dim))
		self.reward = np.zeros((max_size, 1))
		self.not_done = np.zeros((max_size, 1))

		self.tree = SumTree(max_size)
		self.max_priority = 1.0
		self.beta = 0.4

		self.device = device


	def add(self, state, action, next_state, reward, done):
		self.state[self.ptr] = state
		self.action[self.ptr] = action
		self.next_state[self.ptr] = next_state
		self.reward[self.ptr] = reward
		self.not_done[self.ptr] = 1. - done

		self.tree.set(self.ptr, self.max_priority)

		self.ptr = (self.ptr + 1) % self.max_size
		self.size = min(self.size + 1, self.max_size)


	def sample(self, batch_size):
		ind = self.tree.sample(batch_size)

		weights = self.tree.levels[-1][ind] ** -self.beta
		weights /= weights.max()

		self.beta = min(self.beta + 2e-7, 1) # Hardcoded: 0.4 + 2e-7 * 3e6 = 1.0. Only used by PER.

		return (
			torch.FloatTensor(self.state[ind]).to(self.device),
			torch.FloatTensor(self.action[ind]).to(self.device),
			torch.FloatTensor(self.next_state[ind]).to(self.device),
			torch.FloatTensor(self.reward[ind]).to(self.device),
			torch.FloatTensor(self.not_done[ind]).to(self.device),
			ind,
			torch.FloatTensor(weights).to(self.device).reshape(-1, 1)
		)


	def update_priority(self, ind, priority):
		self.max_priority = max(priority.max(), self.max_priority)
		self.tree.batch_set(ind, priority)


class SumTree(object):
	def __init__(self, max_size):
		self.levels = [np.zeros(1)]
		# Tree construction
		# Double the number of nodes at each level
		level_size = 1
		while level_size < max_size:
			level_size *= 2
			self.levels.append(np.zeros(level_size))


	# Batch binary search through sum tree
	# Sample a priority between 0 and the max priority
	# and then search the tree for the corresponding index
	def sample(self, batch_size):
		value = np.random.uniform(0, self.levels[0][0], size=batch_size)
		ind = np.zeros(batch_size, dtype=int)

		for nodes in self.levels[1:]:
			ind *= 2
			left_sum = nodes[ind]

			is_greater = np.greater(value, left_sum)
			# If value > left_sum -> go right (+1), else go left (+0)
			ind += is_greater
			# If we go right, we only need to consider the values in the right tree
			# so we subtract the sum of values in the left tree
			value -= left_sum * is_greater

		return ind


	def set(self, ind, new_priority):
		priority_diff = new_priority - self.levels[-1][ind]

		for nodes in self.levels[::-1]:
			np.add.at(nodes, ind, priority_diff)
			ind //= 2


	def batch_set(self, ind, new_priority):
		# Confirm we don't increment a node twice
		ind, unique_ind = np.unique(ind, return_index=True)
		priority_diff = new_priority[unique_ind] - self.levels[-1][ind]

		for nodes in self.levels[::-1]:
			np.add.at(nodes, ind, priority_diff)
			ind //= 2


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


	def act(self, state):
		a = F.relu(self.l1(state))
		a = F.relu(self.l2(a))
		a = self.l3(a)
		return self.max_action * torch.tanh(a), a


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


class LAP_TD3(object):
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
		alpha=0.4,
		min_priority=1
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
		self.min_priority = min_priority

		self.total_it = 0


	def select_action(self, state, test=False):
		state = torch.FloatTensor(state.reshape(1, -1)).to(device)
		return self.actor(state).cpu().data.numpy().flatten()


	def train(self, replay_buffer, batch_size=64):
		self.total_it += 1

		# Sample replay buffer
		state, action, next_state, reward, not_done, ind, weights = replay_buffer.sample(batch_size)

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

		td_loss1 = (current_Q1 - target_Q).abs()
		td_loss2 = (current_Q2 - target_Q).abs()

		# Compute critic loss
		critic_loss = self.huber(td_loss1) + self.huber(td_loss2)
		
		# Optimize the critic
		self.critic_optimizer.zero_grad()
		critic_loss.backward()
		self.critic_optimizer.step()
		
		priority = torch.max(td_loss1, td_loss2).clamp(min=self.min_priority).pow(self.alpha).cpu().data.numpy().flatten()

		replay_buffer.update_priority(ind, priority)

		# Delayed policy updates
		if self.total_it % self.policy_freq == 0:

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


	def huber(self, x):
		return torch.where(x < self.min_priority, 0.5 * x.pow(2), self.min_priority * x).mean()



# ---------------------------------------------------------------- stand-in for gym HalfCheetah (old gym API)
class Box:
	def __init__(self, low, high, shape, rng):
		self.low, self.high, self.shape, self.rng = low, high, shape, rng

	def sample(self):
		return self.rng.uniform(self.low, self.high, size=self.shape)


class PointReach:
	"""2-D point mass; state (x, y, vx, vy); force action in [-1, 1]^2; reward -distance to the origin."""

	_max_episode_steps = 50

	def __init__(self, seed=0):
		self.rng = np.random.RandomState(seed)
		self.observation_space = Box(-np.inf, np.inf, (4,), self.rng)
		self.action_space = Box(-1.0, 1.0, (2,), self.rng)

	def seed(self, s):
		self.rng.seed(s)

	def reset(self):
		self.t = 0
		self.s = np.concatenate([self.rng.uniform(-1, 1, 2), np.zeros(2)])
		return self.s.copy()

	def step(self, a):
		a = np.clip(a, -1, 1)
		self.s[2:] = 0.8 * self.s[2:] + 0.1 * a
		self.s[:2] = self.s[:2] + self.s[2:]
		self.t += 1
		reward = -np.linalg.norm(self.s[:2])
		return self.s.copy(), reward, self.t >= self._max_episode_steps, {}


def make_env(name):
	return PointReach()


# ---------------------------------------------------------------- continuous/main.py
# Runs policy for X episodes and returns average reward
def eval_policy(policy, env, seed, eval_episodes=10):
	eval_env = make_env(env)
	eval_env.seed(seed + 100)

	avg_reward = 0.
	for _ in range(eval_episodes):
		state, done = eval_env.reset(), False
		while not done:
			action = policy.select_action(np.array(state), test=True)
			state, reward, done, _ = eval_env.step(action)
			avg_reward += reward

	avg_reward /= eval_episodes

	print("---------------------------------------")
	print(f"Evaluation over {eval_episodes} episodes: {avg_reward:.3f}")
	print("---------------------------------------")
	return avg_reward


class Args:
	algorithm = "LAP_TD3"
	env = "PointReach"
	seed = 0
	start_timesteps = 500
	eval_freq = 500
	max_timesteps = 3000
	expl_noise = 0.1
	batch_size = 100
	discount = 0.99
	tau = 0.005
	policy_noise = 0.2
	noise_clip = 0.5
	policy_freq = 2
	alpha = 0.4
	min_priority = 1


def main():
	args = Args()
	env = make_env(args.env)

	# Set seeds
	env.seed(args.seed)
	torch.manual_seed(args.seed)
	np.random.seed(args.seed)

	state_dim = env.observation_space.shape[0]
	action_dim = env.action_space.shape[0]
	max_action = float(env.action_space.high)

	kwargs = {
		"state_dim": state_dim,
		"action_dim": action_dim,
		"max_action": max_action,
		"discount": args.discount,
		"tau": args.tau,
		"policy_noise": args.policy_noise * max_action,
		"noise_clip": args.noise_clip * max_action,
		"policy_freq": args.policy_freq
	}
	kwargs["alpha"] = args.alpha
	kwargs["min_priority"] = args.min_priority

	policy = LAP_TD3(**kwargs)
	replay_buffer = PrioritizedReplayBuffer(state_dim, action_dim)

	# Evaluate untrained policy
	evaluations = [eval_policy(policy, args.env, args.seed)]

	state, done = env.reset(), False
	episode_reward = 0
	episode_timesteps = 0
	episode_num = 0

	for t in range(int(args.max_timesteps)):

		episode_timesteps += 1

		# Select action randomly or according to policy
		if t < args.start_timesteps:
			action = env.action_space.sample()
		else:
			action = (
				policy.select_action(np.array(state))
				+ np.random.normal(0, max_action * args.expl_noise, size=action_dim)
			).clip(-max_action, max_action)

		# Perform action
		next_state, reward, done, _ = env.step(action)
		done_bool = float(done) if episode_timesteps < env._max_episode_steps else 0

		# Store data in replay buffer
		replay_buffer.add(state, action, next_state, reward, done_bool)

		state = next_state
		episode_reward += reward

		# Train agent after collecting sufficient data
		if t >= args.start_timesteps: #>=
			policy.train(replay_buffer, args.batch_size)

		if done:
			# +1 to account for 0 indexing. +0 on ep_timesteps since it will increment +1 even if done=True
			if (episode_num + 1) % 10 == 0:
				print(f"Total T: {t+1} Episode Num: {episode_num+1} Episode T: {episode_timesteps} Reward: {episode_reward:.3f}")
			state, done = env.reset(), False
			episode_reward = 0
			episode_timesteps = 0
			episode_num += 1

		# Evaluate episode
		if (t + 1) % args.eval_freq == 0:
			evaluations.append(eval_policy(policy, args.env, args.seed))

	print(f"[summary] eval_return first={evaluations[0]:.3f} last={evaluations[-1]:.3f} increased={evaluations[-1] > evaluations[0]}")


if __name__ == "__main__":
	torch.set_num_threads(1)
	main()
