# Source: google-deepmind/open_spiel, open_spiel/python/pytorch/policy_gradient.py (PolicyGradient), open_spiel/python/pytorch/losses/rl_losses.py (BatchA2CLoss), open_spiel/python/pytorch/dqn.py (SonnetLinear), open_spiel/python/environments/catch.py, commit 8696b100f4cd0e38017517b86595b4d1a20295ee
# Report: https://github.com/google-deepmind/open_spiel/issues/827
# OpenSpiel's PyTorch PolicyGradient agent (batch A2C): an MLP torso with a policy-logits head and a
# baseline head, episodes collected into a dataset of (info_state, action, return), a critic
# update on every full batch and a policy update every num_critic_before_pi critic updates, both
# through minimize_with_clipping(model, optimizer, loss) with max_global_gradient_norm. The agent
# plays the repository's Catch environment (10x5 board, +1/-1 at the end); scipy's truncnorm
# initialisation is replaced by torch's trunc_normal_ and rl_environment.TimeStep by a namedtuple.
import collections
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

NOOP, LEFT, RIGHT = 1, 0, 2
TimeStep = collections.namedtuple("TimeStep", "observations rewards discounts last")


class CatchEnvironment(object):
  def __init__(self, discount=1.0, width=5, height=10, seed=None):
    self._rng = np.random.RandomState(seed)
    self._width = width
    self._height = height
    self._should_reset = True
    self._discounts = [discount]

  def _legal(self):
    legal_actions = [NOOP]
    if self._paddle_x > 0:
      legal_actions.append(LEFT)
    if self._paddle_x < self._width - 1:
      legal_actions.append(RIGHT)
    return legal_actions

  def reset(self):
    self._should_reset = False
    self._ball = [self._rng.randint(0, self._width - 1), 0]
    self._paddle_x = self._rng.randint(0, self._width - 1)
    return TimeStep({"info_state": [self._get_observation()], "legal_actions": [self._legal()]},
                    None, None, False)

  def step(self, actions):
    if self._should_reset:
      return self.reset()
    action = actions[0]
    if action == LEFT:
      self._paddle_x -= 1
    elif action == RIGHT:
      self._paddle_x += 1
    x, y = self._ball
    if y == self._height - 1:
      done = True
      reward = 1.0 if x == self._paddle_x else -1.0
    else:
      done = False
      reward = 0.0
      self._ball = [x, y + 1]
    self._should_reset = done
    return TimeStep({"info_state": [self._get_observation()], "legal_actions": [self._legal()]},
                    [reward], self._discounts, done)

  def _get_observation(self):
    board = np.zeros((self._height, self._width), dtype=np.float32)
    board[self._ball[1], self._ball[0]] = 1.0
    board[self._height - 1, self._paddle_x] = 1.0
    return board.flatten()


class SonnetLinear(nn.Module):
  def __init__(self, in_size, out_size, activate_relu=True):
    super(SonnetLinear, self).__init__()
    self._activate_relu = activate_relu
    stddev = 1.0 / math.sqrt(in_size)
    self._weight = nn.Parameter(
        nn.init.trunc_normal_(torch.empty(out_size, in_size), 0.0, stddev, -2 * stddev, 2 * stddev))
    self._bias = nn.Parameter(torch.zeros([out_size]))

  def forward(self, tensor):
    y = F.linear(tensor, self._weight, self._bias)
    return F.relu(y) if self._activate_relu else y


def compute_a2c_loss(policy_logits, actions, advantages):
  cross_entropy = F.cross_entropy(policy_logits, actions, reduction="none")
  advantages = advantages.detach()
  return torch.mul(cross_entropy, advantages)


def compute_entropy(policy_logits):
  return torch.sum(
      -F.softmax(policy_logits, dim=1) * F.log_softmax(policy_logits, dim=1), dim=-1)


class BatchA2CLoss(object):
  def __init__(self, entropy_cost=None, name="batch_a2c_loss"):
    self._entropy_cost = entropy_cost
    self._name = name

  def loss(self, policy_logits, baseline, actions, returns):
    advantages = returns - baseline
    policy_loss = compute_a2c_loss(policy_logits, actions, advantages)
    total_loss = torch.mean(policy_loss, dim=0)
    if self._entropy_cost:
      policy_entropy = torch.mean(compute_entropy(policy_logits))
      entropy_loss = torch.mul(float(self._entropy_cost), policy_entropy)
      total_loss = torch.add(total_loss, entropy_loss)
    return total_loss


class MLPTorso(nn.Module):
  def __init__(self, input_size, hidden_sizes):
    super(MLPTorso, self).__init__()
    self._layers = []
    for size in hidden_sizes:
      self._layers.append(SonnetLinear(in_size=input_size, out_size=size))
      input_size = size
    self.model = nn.ModuleList(self._layers)

  def forward(self, x):
    for layer in self.model:
      x = layer(x)
    return x


Transition = collections.namedtuple("Transition", "info_state action reward discount legal_actions_mask")


class PolicyGradient(object):
  def __init__(self, player_id, info_state_size, num_actions, hidden_layers_sizes=(128,),
               batch_size=16, critic_learning_rate=0.01, pi_learning_rate=0.001,
               entropy_cost=0.01, num_critic_before_pi=8, additional_discount_factor=1.0,
               max_global_gradient_norm=None, optimizer_str="sgd"):
    loss_class = BatchA2CLoss
    self._loss_class = loss_class
    self.player_id = player_id
    self._num_actions = num_actions
    self._layer_sizes = hidden_layers_sizes
    self._batch_size = batch_size
    self._extra_discount = additional_discount_factor
    self._num_critic_before_pi = num_critic_before_pi
    self._max_global_gradient_norm = max_global_gradient_norm
    self._episode_data = []
    self._dataset = collections.defaultdict(list)
    self._prev_time_step = None
    self._prev_action = None
    self._step_counter = 0
    self._episode_counter = 0
    self._num_learn_steps = 0
    self.pi_grad_norms = []

    self._net_torso = MLPTorso(info_state_size, self._layer_sizes)
    torso_out_size = self._layer_sizes[-1]
    self._policy_logits_layer = SonnetLinear(torso_out_size, self._num_actions, activate_relu=False)
    self.policy_logits_network = nn.Sequential(self._net_torso, self._policy_logits_layer)

    self._critic_optimizer = optim.SGD if optimizer_str == "sgd" else optim.Adam
    self._baseline_layer = SonnetLinear(torso_out_size, 1, activate_relu=False)
    self._critic_network = nn.Sequential(self._net_torso, self._baseline_layer)
    self._critic_optimizer = self._critic_optimizer(
        self._critic_network.parameters(), lr=critic_learning_rate)

    self.pg_class = loss_class(entropy_cost=entropy_cost)
    self._pi_network = nn.Sequential(self._net_torso, self._policy_logits_layer)
    if optimizer_str == "adam":
      self._pi_optimizer = optim.Adam(self._pi_network.parameters(), lr=pi_learning_rate)
    elif optimizer_str == "sgd":
      self._pi_optimizer = optim.SGD(self._pi_network.parameters(), lr=pi_learning_rate)

  def minimize_with_clipping(self, model, optimizer, loss):
    optimizer.zero_grad()
    loss.backward()
    if self._max_global_gradient_norm is not None:
      nn.utils.clip_grad_norm_(model.parameters(),
                               self._max_global_gradient_norm)
    optimizer.step()

  def _act(self, info_state, legal_actions):
    info_state = torch.Tensor(np.reshape(info_state, [1, -1]))
    torso_out = self._net_torso(info_state)
    self._policy_logits = self._policy_logits_layer(torso_out)
    policy_probs = F.softmax(self._policy_logits, dim=1).detach()
    probs = np.zeros(self._num_actions)
    probs[legal_actions] = policy_probs[0][legal_actions]
    if sum(probs) != 0:
      probs /= sum(probs)
    else:
      probs[legal_actions] = 1 / len(legal_actions)
    action = np.random.choice(len(probs), p=probs)
    return action, probs

  def step(self, time_step, is_evaluation=False):
    if not time_step.last:
      info_state = time_step.observations["info_state"][self.player_id]
      legal_actions = time_step.observations["legal_actions"][self.player_id]
      action, probs = self._act(info_state, legal_actions)
    else:
      action = None
      probs = []
    if not is_evaluation:
      self._step_counter += 1
      if self._prev_time_step:
        self._add_transition(time_step)
      if time_step.last:
        self._add_episode_data_to_dataset()
        self._episode_counter += 1
        if len(self._dataset["returns"]) >= self._batch_size:
          self._critic_update()
          self._num_learn_steps += 1
          if self._num_learn_steps % self._num_critic_before_pi == 0:
            self._pi_update()
          self._dataset = collections.defaultdict(list)
        self._prev_time_step = None
        self._prev_action = None
        return None
      else:
        self._prev_time_step = time_step
        self._prev_action = action
    return action

  def _add_episode_data_to_dataset(self):
    info_states = [data.info_state for data in self._episode_data]
    rewards = [data.reward for data in self._episode_data]
    discount = [data.discount for data in self._episode_data]
    actions = [data.action for data in self._episode_data]
    returns = np.array(rewards)
    for idx in reversed(range(len(rewards[:-1]))):
      returns[idx] = (rewards[idx] + discount[idx] * returns[idx + 1] * self._extra_discount)
    self._dataset["actions"].extend(actions)
    self._dataset["returns"].extend(returns)
    self._dataset["info_states"].extend(info_states)
    self._episode_data = []

  def _add_transition(self, time_step):
    legal_actions = self._prev_time_step.observations["legal_actions"][self.player_id]
    legal_actions_mask = np.zeros(self._num_actions)
    legal_actions_mask[legal_actions] = 1.0
    transition = Transition(
        info_state=self._prev_time_step.observations["info_state"][self.player_id][:],
        action=self._prev_action,
        reward=time_step.rewards[self.player_id],
        discount=time_step.discounts[self.player_id],
        legal_actions_mask=legal_actions_mask)
    self._episode_data.append(transition)

  def _critic_update(self):
    info_state = torch.Tensor(np.array(self._dataset["info_states"]))
    return_ = torch.Tensor(np.array(self._dataset["returns"]))
    torso_out = self._net_torso(info_state)
    baseline = torch.squeeze(self._baseline_layer(torso_out), dim=1)
    critic_loss = torch.mean(F.mse_loss(baseline, return_))
    self.minimize_with_clipping(self._baseline_layer, self._critic_optimizer,
                                critic_loss)
    self._last_critic_loss_value = critic_loss
    return critic_loss

  def _pi_update(self):
    info_state = torch.Tensor(np.array(self._dataset["info_states"]))
    action = torch.LongTensor(self._dataset["actions"])
    return_ = torch.Tensor(np.array(self._dataset["returns"]))
    torso_out = self._net_torso(info_state)
    self._policy_logits = self._policy_logits_layer(torso_out)
    baseline = torch.squeeze(self._baseline_layer(torso_out), dim=1)
    pi_loss = self.pg_class.loss(
        policy_logits=self._policy_logits,
        baseline=baseline,
        actions=action,
        returns=return_)
    self.minimize_with_clipping(self._baseline_layer, self._pi_optimizer,
                                pi_loss)
    self._last_pi_loss_value = pi_loss
    self.pi_grad_norms.append(float(torch.norm(torch.stack(
        [p.grad.norm() for p in self._policy_logits_layer.parameters()]))))
    return pi_loss


def _eval_agent(env, agent, num_episodes):
  rewards = 0.0
  for _ in range(num_episodes):
    time_step = env.reset()
    episode_reward = 0
    while not time_step.last:
      action = agent.step(time_step, is_evaluation=True)
      time_step = env.step([action])
      episode_reward += time_step.rewards[0]
    rewards += episode_reward
  return rewards / num_episodes


def main():
  env = CatchEnvironment(seed=1)
  eval_env = CatchEnvironment(seed=2)
  agent = PolicyGradient(
      player_id=0, info_state_size=50, num_actions=3,
      hidden_layers_sizes=[64, 64], batch_size=32, entropy_cost=0.01,
      critic_learning_rate=0.1, pi_learning_rate=PI_LR, num_critic_before_pi=3,
      max_global_gradient_norm=MAX_NORM)
  for ep in range(NUM_EPISODES):
    if (ep + 1) % EVAL_EVERY == 0:
      with torch.no_grad():
        probs = F.softmax(agent.policy_logits_network(
            torch.Tensor(np.array([env.reset().observations["info_state"][0] for _ in range(64)]))), dim=1)
        ent = float(compute_entropy(torch.log(probs + 1e-12)).mean())
      env._should_reset = True
      norms = agent.pi_grad_norms[-(len(agent.pi_grad_norms) // 2 or 1):]
      print(f"[{ep + 1}] eval avg reward {_eval_agent(eval_env, agent, 200):.3f}  policy entropy {ent:.3f}"
            f"  policy-head step grad norm median {np.median(norms):.3f} max {np.max(norms):.3f}")
    time_step = env.reset()
    while not time_step.last:
      action = agent.step(time_step)
      time_step = env.step([action])
    agent.step(time_step)


PI_LR = 1.0
MAX_NORM = 0.1
NUM_EPISODES = 1500
EVAL_EVERY = 500

if __name__ == "__main__":
  main()
