# Source: kakaoenterprise/JORLDY, jorldy/core/agent/ddpg.py (DDPG), jorldy/core/network/ddpg.py (DDPG_Actor, DDPG_Critic), jorldy/core/network/head.py (MLP), jorldy/core/agent/utils.py (OU_Noise), jorldy/core/agent/base.py (as_tensor, learning_rate_decay), jorldy/core/buffer/replay_buffer.py, jorldy/core/env/gym_env.py (_Gym.step), jorldy/single_train.py, jorldy/config/ddpg/pendulum.py, commit e8902cdbed2500fe350c670d42e6642d52e36b0b
# Report: https://github.com/kakaoenterprise/JORLDY/issues/120
# JORLDY's DDPG agent on Pendulum with the repository's pendulum config (gamma 0.99, tau 1e-3, Adam
# 5e-4 / 1e-3 with cosine learning-rate decay, OU noise, replay buffer, learning every step after
# start_train_step), trained by single_train.py's loop. gym's Pendulum is reimplemented in numpy;
# the hidden size 512 -> 64, batch 128 -> 64, buffer 50000 -> 20000, run_step 100000 -> 2500,
# start_train_step 2000 -> 500; the multiprocess managers are replaced by a print every 500 steps
# and a greedy evaluation at the end.
import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


class PendulumV1:
    def __init__(self, seed=0):
        self.max_speed, self.max_torque, self.dt, self.g, self.m, self.l = 8, 2.0, 0.05, 10.0, 1.0, 1.0
        self.low, self.high = np.array([-2.0], dtype=np.float32), np.array([2.0], dtype=np.float32)
        self.rng = np.random.RandomState(seed)

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
        newthdot = thdot + (3 * self.g / (2 * self.l) * np.sin(th) + 3. / (self.m * self.l ** 2) * u) * self.dt
        newthdot = np.clip(newthdot, -self.max_speed, self.max_speed)
        newth = th + newthdot * self.dt
        self.state = np.array([newth, newthdot])
        self.t += 1
        return self._get_obs(), -costs, self.t >= 200, {}


class Env:
    action_type = "continuous"
    state_size, action_size = 3, 1

    def __init__(self, seed=0):
        self.env = PendulumV1(seed)

    def reset(self):
        self.score = 0
        state = self.env.reset()
        state = np.expand_dims(state, 0)  # for (1, state_size)
        return state

    def step(self, action):
        action = ((action + 1.0) / 2.0) * (self.env.high - self.env.low) + self.env.low
        action = np.reshape(action, (1,))
        next_state, reward, done, info = self.env.step(action)
        self.score += reward
        next_state, reward, done = map(lambda x: np.expand_dims(x, 0), [next_state, [reward], [done]])
        return (next_state, reward, done)


def orthogonal_init(layer, nonlinearity="relu"):
    if isinstance(nonlinearity, str):
        if nonlinearity == "policy":
            gain = 0.01
        else:
            gain = torch.nn.init.calculate_gain(nonlinearity)
    else:  # consider nonlinearity is gain
        gain = nonlinearity
    torch.nn.init.orthogonal_(layer.weight.data, gain)
    torch.nn.init.zeros_(layer.bias.data)


class MLP(torch.nn.Module):
    def __init__(self, D_in, D_hidden=512):
        super(MLP, self).__init__()

        self.l = torch.nn.Linear(D_in, D_hidden)
        self.D_head_out = D_hidden

        for layer in self.__dict__["_modules"].values():
            orthogonal_init(layer)

    def forward(self, x):
        x = F.relu(self.l(x))
        return x


class BaseNetwork(torch.nn.Module):
    def __init__(self, D_in, D_hidden, head):
        super(BaseNetwork, self).__init__()
        self.head = MLP(D_in, D_hidden)
        return self.head.D_head_out

    def forward(self, x, *args, **kwargs):
        x = self.head(x, *args, **kwargs)
        return x


class DDPG_Critic(BaseNetwork):
    def __init__(self, D_in1, D_in2, head="mlp", D_hidden=512):
        D_head_out = super(DDPG_Critic, self).__init__(D_in1, D_hidden, head)
        self.l = torch.nn.Linear(D_head_out + D_in2, D_hidden)
        self.q = torch.nn.Linear(D_hidden, 1)

        orthogonal_init(self.l)
        orthogonal_init(self.q, "linear")

    def forward(self, x1, x2):
        x1 = super(DDPG_Critic, self).forward(x1)
        x = torch.cat([x1, x2], dim=-1)
        x = F.relu(self.l(x))
        return self.q(x)


class DDPG_Actor(BaseNetwork):
    def __init__(self, D_in, D_out, D_hidden=512, head="mlp"):
        D_head_out = super(DDPG_Actor, self).__init__(D_in, D_hidden, head)
        self.mu = torch.nn.Linear(D_head_out, D_out)

        orthogonal_init(self.mu, "tanh")

    def forward(self, x):
        x = super(DDPG_Actor, self).forward(x)
        return torch.tanh(self.mu(x))


def Network(name, *args, **kwargs):
    return {"ddpg_actor": DDPG_Actor, "ddpg_critic": DDPG_Critic}[name](*args, **kwargs)


def Optimizer(name, params, lr):
    return {"adam": torch.optim.Adam}[name](params, lr=lr)


class OU_Noise:
    def __init__(self, action_size, mu, theta, sigma):
        self.action_size = action_size

        self.mu = mu
        self.theta = theta
        self.sigma = sigma

        self.reset()

    def reset(self):
        self.X = np.ones((1, self.action_size), dtype=np.float32) * self.mu

    def sample(self):
        dx = self.theta * (self.mu - self.X) + self.sigma * np.random.randn(len(self.X))
        self.X = self.X + dx
        return self.X


class ReplayBuffer:
    def __init__(self, buffer_size):
        self.buffer = np.zeros(buffer_size, dtype=dict)  # define replay buffer
        self.buffer_index = 0
        self.buffer_size = buffer_size
        self.buffer_counter = 0

    def store(self, transitions):
        for transition in transitions:
            self.buffer[self.buffer_index] = transition
            self.buffer_index = (self.buffer_index + 1) % self.buffer_size
            self.buffer_counter = min(self.buffer_counter + 1, self.buffer_size)

    def sample(self, batch_size):
        batch_idx = np.random.randint(self.buffer_counter, size=batch_size)
        batch = self.buffer[batch_idx]
        transitions = {}
        for key in batch[0].keys():
            transitions[key] = np.stack([b[key][0] for b in batch], axis=0)
        return transitions

    @property
    def size(self):
        return self.buffer_counter


class DDPG:
    action_type = "continuous"

    def __init__(
        self,
        state_size,
        action_size,
        hidden_size=512,
        actor="ddpg_actor",
        critic="ddpg_critic",
        head="mlp",
        optim_config={
            "actor": "adam",
            "critic": "adam",
            "actor_lr": 5e-4,
            "critic_lr": 1e-3,
        },
        gamma=0.99,
        buffer_size=50000,
        batch_size=128,
        start_train_step=2000,
        tau=1e-3,
        # OU noise
        mu=0,
        theta=1e-3,
        sigma=2e-3,
        run_step=1e6,
        device=None,
        **kwargs,
    ):
        self.device = torch.device("cpu")

        self.actor = Network(
            actor, state_size, action_size, D_hidden=hidden_size, head=head
        ).to(self.device)
        self.critic = Network(
            critic, state_size, action_size, D_hidden=hidden_size, head=head
        ).to(self.device)
        self.target_actor = Network(
            actor, state_size, action_size, D_hidden=hidden_size, head=head
        ).to(self.device)
        self.target_actor.load_state_dict(self.actor.state_dict())
        self.target_critic = Network(
            critic, state_size, action_size, D_hidden=hidden_size, head=head
        ).to(self.device)
        self.target_critic.load_state_dict(self.critic.state_dict())

        self.actor_optimizer = Optimizer(
            optim_config["actor"], self.actor.parameters(), lr=optim_config["actor_lr"]
        )
        self.critic_optimizer = Optimizer(
            optim_config["critic"],
            self.critic.parameters(),
            lr=optim_config["critic_lr"],
        )

        self.OU = OU_Noise(action_size, mu, theta, sigma)

        self.gamma = gamma
        self.tau = tau
        self.memory = ReplayBuffer(buffer_size)
        self.batch_size = batch_size
        self.start_train_step = start_train_step
        self.num_learn = 0
        self.run_step = run_step

    def as_tensor(self, x):
        x = torch.as_tensor(x, dtype=torch.float32, device=self.device)
        return x

    def learning_rate_decay(self, step, optimizers=None, mode="cosine"):
        if mode == "cosine":
            weight = np.cos((np.pi / 2) * (step / self.run_step))
        for optimizer in optimizers:
            for g in optimizer.param_groups:
                g["lr"] = optimizer.defaults["lr"] * weight

    @torch.no_grad()
    def act(self, state, training=True):
        self.actor.train(training)
        mu = self.actor(self.as_tensor(state))
        mu = mu.cpu().numpy()
        action = mu + self.OU.sample() if training else mu
        return {"action": action}

    def learn(self):
        transitions = self.memory.sample(self.batch_size)
        for key in transitions.keys():
            transitions[key] = self.as_tensor(transitions[key])

        state = transitions["state"]
        action = transitions["action"]
        reward = transitions["reward"]
        next_state = transitions["next_state"]
        done = transitions["done"]

        # Critic Update
        with torch.no_grad():
            next_actions = self.target_actor(next_state)
            next_q = self.target_critic(next_state, next_actions)
            target_q = reward + (1 - done) * self.gamma * next_q
        q = self.critic(state, action)
        critic_loss = F.mse_loss(target_q, q)

        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()

        max_Q = torch.max(target_q, axis=0).values.cpu().numpy()[0]

        # Actor Update
        action_pred = self.actor(state)
        actor_loss = -self.critic(state, action_pred).mean()

        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()

        self.num_learn += 1

        result = {
            "critic_loss": critic_loss.item(),
            "actor_loss": actor_loss.item(),
            "max_Q": max_Q,
        }
        return result

    def update_target_soft(self):
        for t_p, p in zip(self.target_critic.parameters(), self.critic.parameters()):
            t_p.data.copy_(self.tau * p.data + (1 - self.tau) * t_p.data)

    def process(self, transitions, step):
        result = {}
        # Process per step
        self.memory.store(transitions)

        if self.memory.size >= self.batch_size and step >= self.start_train_step:
            result = self.learn()
            self.learning_rate_decay(
                step, [self.actor_optimizer, self.critic_optimizer]
            )
        if self.num_learn > 0:
            self.update_target_soft()

        return result


def param_gap(a, b):
    return sum((p - q).pow(2).sum().item() for p, q in zip(a.parameters(), b.parameters())) ** 0.5


def evaluate(agent, episodes=3):
    env = Env(seed=123)
    scores = []
    for _ in range(episodes):
        state, done = env.reset(), False
        while not done:
            next_state, reward, done = env.step(agent.act(state, training=False)["action"])
            state = next_state
        scores.append(env.score)
    return float(np.mean(scores))


if __name__ == "__main__":
    run_step, print_period = 2500, 500
    agent_config = {"state_size": Env.state_size, "action_size": Env.action_size,
                    "optim_config": {"actor": "adam", "critic": "adam", "actor_lr": 5e-4, "critic_lr": 1e-3},
                    "run_step": run_step, "hidden_size": 64,
                    "gamma": 0.99, "buffer_size": 20000, "batch_size": 64, "start_train_step": 500, "tau": 1e-3,
                    "mu": 0, "theta": 1e-3, "sigma": 2e-3}
    env = Env(seed=0)
    agent = DDPG(**agent_config)
    state = env.reset()
    scores, losses, max_qs = [], [], []
    for step in range(1, run_step + 1):
        action_dict = agent.act(state, True)
        next_state, reward, done = env.step(action_dict["action"])
        transition = {"state": state, "next_state": next_state, "reward": reward, "done": done}
        transition.update(action_dict)
        transition = {k: v if k in ("state", "next_state") else np.asarray(v, dtype=np.float32)
                      for k, v in transition.items()}
        result = agent.process([transition], step)
        if result:
            losses.append(result["critic_loss"])
            max_qs.append(result["max_Q"])
        if done:
            scores.append(env.score)
            state = env.reset()
        else:
            state = next_state
        if step % print_period == 0:
            print(f"step {step}: score {np.mean(scores[-2:]) if scores else float('nan'):.1f}  "
                  f"critic loss {np.mean(losses[-print_period:]) if losses else float('nan'):.4f}  "
                  f"max_Q {np.mean(max_qs[-print_period:]) if max_qs else float('nan'):.2f}  "
                  f"|target_actor - actor| {param_gap(agent.target_actor, agent.actor):.4f}")
    print(f"greedy evaluation score: {evaluate(agent):.1f}")
