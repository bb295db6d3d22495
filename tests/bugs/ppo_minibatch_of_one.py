"""PPO (discrete): actor and critic heads of one Agent called through get_action_and_value (the
Agent's forward is never called), rollouts under no_grad into preallocated buffers, GAE under
no_grad, lr annealed by writing param_groups[0]["lr"], minibatch epochs with the clipped
surrogate, clipped value loss, entropy bonus, clip_grad_norm_, approx-KL diagnostics under
no_grad and read with .item().

Source: vwxyzjn/cleanrl, cleanrl/ppo.py, commit fe8d8a03c41a7ef5b523e2e354bd01c363e786bb.
Reduced: hidden 16, 2 envs (numpy cart-pole of _env.py) x 8 steps, 2 iterations, 2 epochs of
2 minibatches; the tensorboard writer is dropped.

Mutation: `num_minibatches` set to the batch size (16): each minibatch holds one sample and `mb_advantages.std()` is NaN (one degree of freedom), so the loss is NaN.
Expected: error numerical.nonfinite_loss produced by aten::std at the advantage-normalization line.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.distributions.categorical import Categorical

from corpus._env import CartPole

num_envs, num_steps, num_iterations, update_epochs, num_minibatches = 2, 8, 1, 1, 16
learning_rate, gamma, gae_lambda, clip_coef, ent_coef, vf_coef, max_grad_norm = 2.5e-4, 0.99, 0.95, 0.2, 0.01, 0.5, 0.5


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(layer_init(nn.Linear(4, 16)), nn.Tanh(), layer_init(nn.Linear(16, 16)), nn.Tanh(),
                                    layer_init(nn.Linear(16, 1), std=1.0))
        self.actor = nn.Sequential(layer_init(nn.Linear(4, 16)), nn.Tanh(), layer_init(nn.Linear(16, 16)), nn.Tanh(),
                                   layer_init(nn.Linear(16, 2), std=0.01))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        logits = self.actor(x)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


class SyncVectorEnv:
    def __init__(self, n):
        self.envs = [CartPole(seed=i) for i in range(n)]

    def reset(self, seed=None):
        return np.stack([e.reset()[0] for e in self.envs]), {}

    def step(self, actions):
        out = []
        for e, a in zip(self.envs, actions):
            o, r, term, trunc, _ = e.step(a)
            if term or trunc:
                o, _ = e.reset()
            out.append((o, r, term, trunc))
        o, r, term, trunc = zip(*out)
        return np.stack(o), np.array(r, np.float32), np.array(term), np.array(trunc), {}


def build():
    np.random.seed(1)
    torch.manual_seed(1)
    envs = SyncVectorEnv(num_envs)
    agent = Agent()
    optimizer = optim.Adam(agent.parameters(), lr=learning_rate, eps=1e-5)
    batch_size = num_envs * num_steps
    minibatch_size = batch_size // num_minibatches

    def train():
        obs = torch.zeros((num_steps, num_envs, 4))
        actions = torch.zeros((num_steps, num_envs))
        logprobs = torch.zeros((num_steps, num_envs))
        rewards = torch.zeros((num_steps, num_envs))
        dones = torch.zeros((num_steps, num_envs))
        values = torch.zeros((num_steps, num_envs))
        next_obs, _ = envs.reset(seed=1)
        next_obs = torch.Tensor(next_obs)
        next_done = torch.zeros(num_envs)
        for iteration in range(1, num_iterations + 1):
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * learning_rate
            for step in range(0, num_steps):
                obs[step] = next_obs
                dones[step] = next_done
                with torch.no_grad():
                    action, logprob, _, value = agent.get_action_and_value(next_obs)
                    values[step] = value.flatten()
                actions[step] = action
                logprobs[step] = logprob
                next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
                next_done = np.logical_or(terminations, truncations)
                rewards[step] = torch.tensor(reward).view(-1)
                next_obs, next_done = torch.Tensor(next_obs), torch.Tensor(next_done)
            with torch.no_grad():
                next_value = agent.get_value(next_obs).reshape(1, -1)
                advantages = torch.zeros_like(rewards)
                lastgaelam = 0
                for t in reversed(range(num_steps)):
                    if t == num_steps - 1:
                        nextnonterminal = 1.0 - next_done
                        nextvalues = next_value
                    else:
                        nextnonterminal = 1.0 - dones[t + 1]
                        nextvalues = values[t + 1]
                    delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
                    advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
                returns = advantages + values
            b_obs = obs.reshape((-1, 4))
            b_logprobs = logprobs.reshape(-1)
            b_actions = actions.reshape(-1)
            b_advantages = advantages.reshape(-1)
            b_returns = returns.reshape(-1)
            b_values = values.reshape(-1)
            b_inds = np.arange(batch_size)
            clipfracs = []
            for epoch in range(update_epochs):
                np.random.shuffle(b_inds)
                for start in range(0, batch_size, minibatch_size):
                    mb_inds = b_inds[start:start + minibatch_size]
                    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions.long()[mb_inds])
                    logratio = newlogprob - b_logprobs[mb_inds]
                    ratio = logratio.exp()
                    with torch.no_grad():
                        old_approx_kl = (-logratio).mean()
                        approx_kl = ((ratio - 1) - logratio).mean()
                        clipfracs += [((ratio - 1.0).abs() > clip_coef).float().mean().item()]
                    mb_advantages = b_advantages[mb_inds]
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)  # <- bug
                    pg_loss1 = -mb_advantages * ratio
                    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
                    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
                    newvalue = newvalue.view(-1)
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(newvalue - b_values[mb_inds], -clip_coef, clip_coef)
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                    entropy_loss = entropy.mean()
                    loss = pg_loss - ent_coef * entropy_loss + v_loss * vf_coef
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(agent.parameters(), max_grad_norm)
                    optimizer.step()
            y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
            var_y = np.var(y_true)
            explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
            print(v_loss.item(), pg_loss.item(), entropy_loss.item(), old_approx_kl.item(), approx_kl.item(),
                  np.mean(clipfracs), explained_var)

    return [agent], [optimizer], train


if __name__ == "__main__":
    build()[2]()
