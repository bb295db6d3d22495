# Source: quantumiracle/Popular-RL-Algorithms, ppo_gae_continuous.py, commit 3b814ea159f1fc0b521d6e0e699a7945f770f105
# https://github.com/quantumiracle/Popular-RL-Algorithms/blob/master/ppo_gae_continuous.py
#
# PPO (clip) with GAE for a continuous Gaussian policy: separate tanh towers for mean, log-std and value on a
# shared 2-layer trunk, the log-std tower reads the trunk through x.detach() (the std is not allowed to shape the
# features), behaviour probabilities stored as exp(sum log_prob) and the ratio formed as exp(log pi - log prob),
# GAE computed in numpy from a detached TD error with the done masks flipped alongside, advantages normalised,
# K_epoch=10 full-batch passes over a 1280-step buffer that spans episode boundaries, one Adam on everything.
# Adaptation: gym Ant-v2 (MuJoCo) -> a 2-D point-reaching env (state = position and target, action = velocity in
# [-1, 1]^2, reward = -distance, 40 steps per episode) written below; `prob` is stored as prob.item() (the
# original keeps each sample's autograd graph in the buffer until torch.tensor() copies it); 10000 episodes ->
# 640; learning_rate 1e-4 -> 1e-3; fixed seeds; a summary line.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Normal

learning_rate = 1e-3
gamma         = 0.99
lmbda         = 0.95
eps_clip      = 0.1
batch_size    = 1280
K_epoch       = 10
T_horizon     = 10000


class PointReachEnv:
    """Stand-in for a gym continuous-control env: move a point to a random target; reward = -distance."""

    def __init__(self, seed=0, max_steps=40):
        self.rng = np.random.RandomState(seed)
        self.max_steps = max_steps

    def reset(self):
        self.t = 0
        self.pos = self.rng.uniform(-1, 1, size=2)
        self.target = self.rng.uniform(-1, 1, size=2)
        return np.concatenate([self.pos, self.target]).astype(np.float32)

    def step(self, a):
        a = np.clip(np.asarray(a, dtype=np.float64), -1.0, 1.0)
        self.pos = np.clip(self.pos + 0.1 * a, -1.5, 1.5)
        self.t += 1
        r = -float(np.linalg.norm(self.pos - self.target))
        done = self.t >= self.max_steps
        return np.concatenate([self.pos, self.target]).astype(np.float32), r, done, {}


class PPO(nn.Module):
    def __init__(self, num_inputs, num_actions, hidden_size, action_range = 1.):
        super(PPO, self).__init__()
        self.data = []
        self.action_range = action_range
        self.linear1 = nn.Linear(num_inputs, hidden_size)
        self.linear2 = nn.Linear(hidden_size, hidden_size)
        self.linear3 = nn.Linear(hidden_size, hidden_size)
        self.linear4 = nn.Linear(hidden_size, hidden_size)
        self.linear5 = nn.Linear(hidden_size, hidden_size)
        self.linear6 = nn.Linear(hidden_size, hidden_size)

        self.mean_linear = nn.Linear(hidden_size, num_actions)
        self.log_std_linear = nn.Linear(hidden_size, num_actions)

        self.v_linear = nn.Linear(hidden_size, 1)

        self.optimizer = optim.Adam(self.parameters(), lr=learning_rate)

    def pi(self, x):
        x = F.tanh(self.linear1(x))
        x = F.tanh(self.linear2(x))
        x1 = F.tanh(self.linear3(x))
        x2 = F.tanh(self.linear4(x.detach())) # std learning not BP to the feature

        mean    = F.tanh(self.mean_linear(x1))
        log_std = self.log_std_linear(x2)

        return mean, log_std

    def v(self, x):
        x = F.tanh(self.linear1(x))
        x = F.tanh(self.linear2(x))
        x = F.tanh(self.linear5(x))
        x = F.tanh(self.linear6(x))
        v = self.v_linear(x)
        return v

    def get_action(self, x):
        mean, log_std = self.pi(x)
        std = log_std.exp()
        normal = Normal(mean, std)
        action = normal.sample()
        log_prob = normal.log_prob(action).sum(-1)
        prob = log_prob.exp()
        action = self.action_range*action # scale the action

        return action.detach().numpy(), prob

    def get_log_prob(self, mean, log_std, action):
        action = action/self.action_range
        log_prob = Normal(mean, log_std.exp()).log_prob(action)
        log_prob = log_prob.sum(dim=-1, keepdim=True)  # reduce dim
        return log_prob

    def put_data(self, transition):
        self.data.append(transition)

    def make_batch(self):
        s_lst, a_lst, r_lst, s_prime_lst, prob_a_lst, done_lst = [], [], [], [], [], []
        for transition in self.data:
            s, a, r, s_prime, prob_a, done = transition

            s_lst.append(s)
            a_lst.append(a)
            r_lst.append([r])
            s_prime_lst.append(s_prime)
            prob_a_lst.append([prob_a])
            done_mask = 0 if done else 1
            done_lst.append([done_mask])

        s,a,r,s_prime,done_mask, prob_a = torch.tensor(np.array(s_lst), dtype=torch.float), torch.tensor(np.array(a_lst)), \
                                          torch.tensor(r_lst, dtype=torch.float), torch.tensor(np.array(s_prime_lst), dtype=torch.float), \
                                          torch.tensor(done_lst, dtype=torch.float), torch.tensor(prob_a_lst)
        self.data = []
        return s, a, r, s_prime, done_mask, prob_a

    def train_net(self):
        s, a, r, s_prime, done_mask, prob_a = self.make_batch()
        done_mask_ = torch.flip(done_mask, dims=(0,))
        td_target = r + gamma * self.v(s_prime) * done_mask
        delta = td_target - self.v(s)
        delta = delta.detach().numpy()

        advantage_lst = []
        advantage = 0.0
        for delta_t, mask in zip(delta[::-1], done_mask_):
            advantage = gamma * lmbda * advantage * mask + delta_t[0]
            advantage_lst.append([advantage])
        advantage_lst.reverse()
        advantage = torch.tensor(advantage_lst, dtype=torch.float)
        if not np.isnan(advantage.std()):
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)

        for i in range(K_epoch):
            mean, log_std = self.pi(s)
            log_pi_a = self.get_log_prob(mean, log_std, a)
            ratio = torch.exp(log_pi_a - torch.log(prob_a))  # a/b == exp(log(a)-log(b))
            surr1 = ratio * advantage
            surr2 = torch.clamp(ratio, 1-eps_clip, 1+eps_clip) * advantage
            loss = -torch.min(surr1, surr2) + F.smooth_l1_loss(self.v(s) , td_target.detach())

            self.optimizer.zero_grad()
            loss.mean().backward()
            self.optimizer.step()


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    env = PointReachEnv(seed=0)
    state_dim = 4
    action_dim = 2
    hidden_dim = 64
    model = PPO(state_dim, action_dim, hidden_dim)
    score = 0.0
    print_interval = 64
    step = 0
    history = []

    for n_epi in range(640):
        s = env.reset()
        done = False
        for t in range(T_horizon):
            step += 1
            a, prob = model.get_action(torch.from_numpy(s).float())
            s_prime, r, done, info = env.step(a)

            model.put_data((s, a, r, s_prime, prob.item(), done))
            s = s_prime

            score += r
            if (step+1) % batch_size == 0:
                model.train_net()
            if done:
                break
        if (n_epi + 1) % print_interval == 0:
            print("# of episode :{}, avg score : {:.1f}".format(n_epi + 1, score/print_interval))
            history.append(score / print_interval)
            score = 0.0
    print('[summary] avg_score first=%.1f last=%.1f best=%.1f increased=%s' % (
        history[0], history[-1], max(history), history[-1] > history[0]))


if __name__ == '__main__':
    main()
