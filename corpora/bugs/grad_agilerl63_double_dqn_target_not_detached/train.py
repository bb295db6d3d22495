# Source: AgileRL/AgileRL, agilerl/algorithms/dqn.py (DQN), agilerl/networks/evolvable_mlp.py (EvolvableMLP), commit 8ea3aabfadc16a176e09cf7a071bad3f99b8c963
# Report: https://github.com/AgileRL/AgileRL/pull/63
# AgileRL DQN with double Q-learning: an EvolvableMLP Q-network and a soft-updated target copy,
# Adam on the online network, epsilon-greedy exploration, a replay buffer and a learn() call every
# learn_step environment steps. The gym environment is replaced by a deterministic chain MDP with
# one-hot observations whose optimal Q-values are known, so the run prints the error of the
# learned Q-values against Q* and the greedy return.
import random
from collections import OrderedDict, deque, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

random.seed(0)
np.random.seed(0)
torch.manual_seed(0)
torch.set_num_threads(1)


class EvolvableMLP(nn.Module):
    def __init__(self, num_inputs, num_outputs, hidden_size, activation='relu',
                 output_vanish=True, device='cpu'):
        super(EvolvableMLP, self).__init__()
        self.num_inputs = num_inputs
        self.num_outputs = num_outputs
        self.activation = activation
        self.output_vanish = output_vanish
        self.hidden_size = hidden_size
        self.device = device
        self.net = self.create_net()

    def create_net(self):
        net_dict = OrderedDict()
        net_dict["linear_layer_0"] = nn.Linear(self.num_inputs, self.hidden_size[0])
        net_dict["activation_0"] = nn.ReLU()
        if len(self.hidden_size) > 1:
            for l_no in range(1, len(self.hidden_size)):
                net_dict[f"linear_layer_{str(l_no)}"] = nn.Linear(
                    self.hidden_size[l_no - 1], self.hidden_size[l_no])
                net_dict[f"activation_{str(l_no)}"] = nn.ReLU()
        output_layer = nn.Linear(self.hidden_size[-1], self.num_outputs)
        if self.output_vanish:
            output_layer.weight.data.mul_(0.1)
            output_layer.bias.data.mul_(0.1)
        net_dict["linear_layer_output"] = output_layer
        return nn.Sequential(net_dict)

    def forward(self, x):
        if not isinstance(x, torch.Tensor):
            x = torch.FloatTensor(np.array(x)).to(self.device)
        return self.net(x)


class DQN():
    def __init__(self, state_dim, action_dim, one_hot, index=0,
                 net_config={'arch': 'mlp', 'h_size': [64, 64]}, batch_size=64, lr=1e-4,
                 learn_step=5, gamma=0.99, tau=1e-3, mutation=None, double=False, device='cpu'):
        self.algo = 'DQN'
        self.state_dim = state_dim
        self.action_dim = action_dim
        self.one_hot = one_hot
        self.net_config = net_config
        self.batch_size = batch_size
        self.lr = lr
        self.learn_step = learn_step
        self.gamma = gamma
        self.tau = tau
        self.mut = mutation
        self.device = device
        self.index = index
        self.scores = []
        self.fitness = []
        self.steps = [0]
        self.double = double

        self.actor = EvolvableMLP(num_inputs=state_dim[0], num_outputs=action_dim,
                                  hidden_size=self.net_config['h_size'], device=self.device).to(self.device)
        self.actor_target = EvolvableMLP(num_inputs=state_dim[0], num_outputs=action_dim,
                                         hidden_size=self.net_config['h_size'], device=self.device).to(self.device)
        self.actor_target.load_state_dict(self.actor.state_dict())

        self.optimizer = optim.Adam(self.actor.parameters(), lr=self.lr)
        self.criterion = nn.MSELoss()

    def getAction(self, state, epsilon=0):
        state = torch.from_numpy(state).float().to(self.device)
        if self.one_hot:
            state = nn.functional.one_hot(state.long(), num_classes=self.state_dim[0]).float().squeeze()
        if len(state.size()) < 2:
            state = state.unsqueeze(0)
        # epsilon-greedy
        if random.random() < epsilon:
            action = np.random.randint(0, self.action_dim, size=state.size()[0])
        else:
            self.actor.eval()
            with torch.no_grad():
                action_values = self.actor(state)
            self.actor.train()
            action = np.argmax(action_values.cpu().data.numpy(), axis=1)
        return action

    def learn(self, experiences):
        states, actions, rewards, next_states, dones = experiences

        if self.one_hot:
            states = nn.functional.one_hot(
                states.long(), num_classes=self.state_dim[0]).float().squeeze()
            next_states = nn.functional.one_hot(
                next_states.long(), num_classes=self.state_dim[0]).float().squeeze()

        if self.double:  # Double Q-learning
            q_idx = self.actor_target(next_states).argmax(dim=1).unsqueeze(1)
            q_target = self.actor(next_states).gather(dim=1, index=q_idx)
        else:
            q_target = self.actor_target(next_states).detach().max(axis=1)[0].unsqueeze(1)

        # target, if terminal then y_j = rewards
        y_j = rewards + self.gamma * q_target * (1 - dones)
        q_eval = self.actor(states).gather(1, actions.long())

        # loss backprop
        loss = self.criterion(q_eval, y_j)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

        # soft update target network
        self.softUpdate()
        return loss.item()

    def softUpdate(self):
        for eval_param, target_param in zip(self.actor.parameters(), self.actor_target.parameters()):
            target_param.data.copy_(self.tau * eval_param.data + (1.0 - self.tau) * target_param.data)


class ReplayBuffer():
    def __init__(self, action_dim, memory_size, field_names, device='cpu'):
        self.action_dim = action_dim
        self.memory = deque(maxlen=memory_size)
        self.experience = namedtuple("Experience", field_names=field_names)
        self.counter = 0
        self.device = device

    def __len__(self):
        return len(self.memory)

    def save2memory(self, *args):
        self.memory.append(self.experience(*args))
        self.counter += 1

    def sample(self, batch_size):
        experiences = random.sample(self.memory, k=batch_size)
        out = []
        for field in self.experience._fields:
            vals = np.vstack([np.array(getattr(e, field), dtype=np.float32).reshape(1, -1) for e in experiences])
            out.append(torch.from_numpy(vals).float().to(self.device))
        return tuple(out)


class ChainEnv():
    """Slippery chain: the chosen move (1 right, 0 left) happens with probability 1 - slip, the
    opposite one otherwise; reaching the last state pays 1 and ends the episode."""

    def __init__(self, n=8, max_steps=30, slip=0.3, seed=0):
        self.n = n
        self.max_steps = max_steps
        self.slip = slip
        self.rng = np.random.RandomState(seed)

    def reset(self):
        self.s = 0
        self.t = 0
        return np.array([self.s]), {}

    def step(self, action):
        a = int(np.asarray(action).reshape(-1)[0])
        self.t += 1
        reward = 0.0
        if self.rng.rand() < self.slip:
            a = 1 - a
        self.s = self.s + 1 if a == 1 else max(self.s - 1, 0)
        done = self.s == self.n - 1
        if done:
            reward = 1.0
        return np.array([self.s]), reward, done, self.t >= self.max_steps, {}


def optimal_q(env, gamma):
    q = np.zeros((env.n, 2))
    for _ in range(2000):
        v = q.max(axis=1)
        new = np.zeros_like(q)
        for s in range(env.n - 1):
            for a in range(2):
                for move, p in ((a, 1 - env.slip), (1 - a, env.slip)):
                    s2 = s + 1 if move == 1 else max(s - 1, 0)
                    r = 1.0 if s2 == env.n - 1 else 0.0
                    new[s, a] += p * (r + (0.0 if s2 == env.n - 1 else gamma * v[s2]))
        q = new
    return q


def main():
    env = ChainEnv()
    agent = DQN(state_dim=[env.n], action_dim=2, one_hot=True, batch_size=64, lr=1e-3,
                learn_step=1, gamma=0.9, tau=1e-2, double=True)
    memory = ReplayBuffer(2, 10000, ["state", "action", "reward", "next_state", "done"])
    q_star = optimal_q(env, agent.gamma)
    all_states = nn.functional.one_hot(torch.arange(env.n - 1), num_classes=env.n).float()

    eps, eps_end, eps_decay = 1.0, 0.1, 0.98
    total_steps = 0
    for episode in range(1, 81):
        state, _ = env.reset()
        score = 0.0
        losses = []
        for _ in range(env.max_steps):
            action = agent.getAction(state, eps)
            next_state, reward, done, trunc, _ = env.step(action)
            memory.save2memory(state, action, reward, next_state, float(done))
            total_steps += 1
            if len(memory) >= agent.batch_size and total_steps % agent.learn_step == 0:
                losses.append(agent.learn(memory.sample(agent.batch_size)))
            state = next_state
            score += reward
            if done or trunc:
                break
        eps = max(eps_end, eps * eps_decay)
        if episode % 20 == 0:
            with torch.no_grad():
                q = agent.actor(all_states).numpy()
            err = np.abs(q - q_star[:env.n - 1]).mean()
            greedy = (q.argmax(axis=1) == q_star[:env.n - 1].argmax(axis=1)).mean()
            # greedy return
            s, _ = env.reset()
            ret = 0.0
            for _ in range(env.max_steps):
                s, r, d, tr, _ = env.step(agent.getAction(s, 0))
                ret += r
                if d or tr:
                    break
            print(f"episode {episode}: score {score:.2f}  loss {np.mean(losses) if losses else 0:.5f}  "
                  f"|Q-Q*| {err:.4f}  Q(s0,right) {q[0, 1]:.4f} (Q* {q_star[0, 1]:.4f})  "
                  f"greedy actions optimal {greedy:.0%}  greedy return {ret:.2f}")


if __name__ == "__main__":
    main()
