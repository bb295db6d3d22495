# Source: astariul/encode-attend-navigate-pytorch, trainer.py (Trainer.train_step, reward_fn), agent.py (Agent), module.py (Embedding, MultiHeadAttention, FeedForward, Encoder, Pointer, FullGlimpse, Decoder, Critic)
# Report: https://github.com/astariul/encode-attend-navigate-pytorch/issues/2
# Encode-Attend-Navigate for the 2-D travelling salesman problem: an attention encoder, a
# pointer decoder with a 3-step history sampling the tour, and a separate critic (own
# embedding + encoder + glimpse) predicting the tour length, trained with REINFORCE using the
# critic as baseline plus an MSE loss for the critic. Sizes are reduced (10 cities, hidden 32,
# 1 encoder layer, 4 heads), batches are random uniform cities; 250 steps on one CPU thread.
import numpy as np
import torch
import torch.distributions as distrib
import torch.nn as nn
import torch.nn.functional as F

LARGE_NUMBER = 100_000_000


def reward_fn(coords, tour):
    dim = coords.size(-1)
    ordered_coords = torch.gather(coords, 1, tour.long().unsqueeze(-1).repeat(1, 1, dim))
    ordered_coords = ordered_coords.transpose(0, 2)
    delta2 = [torch.square(d[1:] - d[:-1]).transpose(0, 1) for d in ordered_coords]
    inter_city_distances = torch.sqrt(sum(delta2))
    distance = inter_city_distances.sum(dim=-1)
    return distance.float()


class Embedding(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.conv = nn.Conv1d(in_dim, out_dim, 1, bias=False)
        self.batch_norm = nn.BatchNorm1d(out_dim, eps=0.001, momentum=0.01)

    def forward(self, x):
        return self.batch_norm(self.conv(x.transpose(1, 2))).transpose(1, 2)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_hidden, num_heads, p_dropout):
        super().__init__()
        self.q = nn.Linear(n_hidden, n_hidden)
        self.k = nn.Linear(n_hidden, n_hidden)
        self.v = nn.Linear(n_hidden, n_hidden)
        self.dropout = nn.Dropout(p_dropout)
        self.batch_norm = nn.BatchNorm1d(n_hidden, eps=0.001, momentum=0.01)
        self.num_heads = num_heads

    def forward(self, inputs):
        bs, _, n_hidden = inputs.size()
        q = F.relu(self.q(inputs))
        k = F.relu(self.k(inputs))
        v = F.relu(self.v(inputs))
        q_ = torch.cat(torch.split(q, n_hidden // self.num_heads, dim=2))
        k_ = torch.cat(torch.split(k, n_hidden // self.num_heads, dim=2))
        v_ = torch.cat(torch.split(v, n_hidden // self.num_heads, dim=2))
        outputs = torch.matmul(q_, torch.transpose(k_, 2, 1)) / (k_.size(-1) ** 0.5)
        outputs = self.dropout(F.softmax(outputs, dim=-1))
        outputs = torch.matmul(outputs, v_)
        outputs = torch.cat(torch.split(outputs, bs), dim=2)
        outputs = outputs + inputs
        return self.batch_norm(outputs.transpose(1, 2)).transpose(1, 2)


class FeedForward(nn.Module):
    def __init__(self, layers_size):
        super().__init__()
        self.layers = nn.ModuleList([nn.Conv1d(i, o, 1) for i, o in zip(layers_size[:-1], layers_size[1:])])
        self.batch_norm = nn.BatchNorm1d(layers_size[-1], eps=0.001, momentum=0.01)

    def forward(self, inputs):
        inputs = inputs.transpose(1, 2)
        outputs = inputs
        for i, layer in enumerate(self.layers):
            outputs = layer(outputs)
            if i < len(self.layers) - 1:
                outputs = F.relu(outputs)
        outputs = outputs + inputs
        return self.batch_norm(outputs).transpose(1, 2)


class Encoder(nn.Module):
    def __init__(self, num_layers, n_hidden, ff_hidden, num_heads, p_dropout):
        super().__init__()
        self.layers = nn.ModuleList([nn.Sequential(MultiHeadAttention(n_hidden, num_heads, p_dropout),
                                                   FeedForward([n_hidden, ff_hidden, n_hidden]))
                                     for _ in range(num_layers)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Pointer(nn.Module):
    def __init__(self, query_dim, n_hidden):
        super().__init__()
        self.w_q = nn.Linear(query_dim, n_hidden, bias=False)
        self.v = nn.Parameter(torch.empty(n_hidden).uniform_(-0.3, 0.3))

    def forward(self, encoded_ref, query, mask, c=10, temp=1):
        encoded_query = self.w_q(query).unsqueeze(1)
        scores = torch.sum(self.v * torch.tanh(encoded_ref + encoded_query), dim=-1)
        scores = c * torch.tanh(scores / temp)
        return torch.clip(scores - LARGE_NUMBER * mask, -LARGE_NUMBER, LARGE_NUMBER)


class Decoder(nn.Module):
    def __init__(self, n_hidden, att_dim, query_dim, n_history):
        super().__init__()
        self.dense = nn.Linear(n_hidden, att_dim, bias=False)
        self.n_history = n_history
        self.queriers = nn.ModuleList([nn.Linear(n_hidden, query_dim, bias=False) for _ in range(n_history)])
        self.pointer = Pointer(query_dim, att_dim)
        self.first_h = nn.Parameter(torch.empty(1, n_hidden).uniform_(-0.3, 0.3))

    def forward(self, inputs, c=10, temp=1):
        batch_size, seq_len, hidden = inputs.size()
        idx_list, log_probs, entropies = [], [], []
        mask = torch.zeros([batch_size, seq_len])
        encoded_input = self.dense(inputs)
        prev_actions = [self.first_h.repeat(batch_size, 1) for _ in range(self.n_history)]
        for _ in range(seq_len):
            query = F.relu(torch.stack([querier(prev_action) for prev_action, querier
                                        in zip(prev_actions, self.queriers)]).sum(dim=0))
            logits = self.pointer(encoded_input, query, mask, c=c, temp=temp)
            probs = distrib.Categorical(logits=logits)
            idx = probs.sample()
            idx_list.append(idx)
            log_probs.append(probs.log_prob(idx))
            entropies.append(probs.entropy())
            mask = mask + F.one_hot(idx, seq_len)
            action_rep = inputs[torch.arange(batch_size), idx]
            prev_actions.pop(0)
            prev_actions.append(action_rep)
        idx_list.append(idx_list[0])
        tour = torch.stack(idx_list, dim=1)
        log_probs = sum(log_probs)
        entropies = sum(entropies)
        return tour, log_probs, entropies


class FullGlimpse(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.dense = nn.Linear(in_dim, out_dim, bias=False)
        self.v = nn.Parameter(torch.empty(out_dim).uniform_(-0.3, 0.3))

    def forward(self, ref):
        encoded_ref = self.dense(ref)
        scores = torch.sum(self.v * torch.tanh(encoded_ref), dim=-1)
        attention = F.softmax(scores, dim=-1)
        glimpse = ref * attention.unsqueeze(-1)
        return torch.sum(glimpse, dim=1)


class Critic(nn.Module):
    def __init__(self, n_hidden, att_hidden, crit_hidden):
        super().__init__()
        self.glimpse = FullGlimpse(n_hidden, att_hidden)
        self.hidden = nn.Linear(n_hidden, crit_hidden)
        self.output = nn.Linear(crit_hidden, 1)

    def forward(self, inputs):
        frame = self.glimpse(inputs)
        hidden_out = F.relu(self.hidden(frame))
        return self.output(hidden_out).squeeze(-1)


class Agent(nn.Module):
    def __init__(self, space_dim=2, embed_hidden=32, enc_stacks=1, ff_hidden=64, enc_heads=4,
                 query_hidden=48, att_hidden=32, crit_hidden=32, n_history=3, p_dropout=0.1):
        super().__init__()
        self.actor_embedding = Embedding(space_dim, embed_hidden)
        self.actor_encoder = Encoder(enc_stacks, embed_hidden, ff_hidden, enc_heads, p_dropout)
        self.decoder = Decoder(embed_hidden, att_hidden, query_hidden, n_history)
        self.critic_embedding = Embedding(space_dim, embed_hidden)
        self.critic_encoder = Encoder(enc_stacks, embed_hidden, ff_hidden, enc_heads, p_dropout)
        self.critic = Critic(embed_hidden, att_hidden, crit_hidden)

    def forward(self, inputs, c=10, temp=1):
        encoder_hidden = self.actor_encoder(self.actor_embedding(inputs))
        tour, log_probs, entropies = self.decoder(encoder_hidden, c=c, temp=temp)
        encoder_hidden = self.critic_encoder(self.critic_embedding(inputs))
        critique = self.critic(encoder_hidden)
        return tour, critique, log_probs, entropies


class Trainer:
    def __init__(self, conf, agent, rng):
        self.conf = conf
        self.agent = agent
        self.rng = rng
        self.optim = torch.optim.Adam(params=self.agent.parameters(), lr=conf["lr"])
        gamma = 1 - conf["lr_decay_rate"] / conf["lr_decay_steps"]
        self.scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer=self.optim, gamma=gamma)

    def train_step(self, data):
        self.optim.zero_grad()
        tour, critique, log_probs, _ = self.agent(data)
        reward = reward_fn(data, tour)
        loss1 = ((reward - critique) * log_probs).mean()
        loss2 = F.mse_loss(reward, critique)
        (loss1 + loss2).backward()
        self.optim.step()
        self.scheduler.step()
        return reward.mean(), critique.mean(), [loss1, loss2]

    def run(self):
        self.agent.train()
        log = self.conf["log_interval"]
        running = np.zeros(4)
        for step in range(self.conf["steps"]):
            batch = torch.Tensor(self.rng.rand(self.conf["batch_size"], self.conf["max_len"], 2))
            reward, crit, losses = self.train_step(batch)
            running += [reward.item(), crit.item(), losses[0].item(), losses[1].item()]
            if step % log == log - 1:
                r = running / log
                print("step {:3d} tour length {:.3f} | critic prediction {:.3f} | actor_loss {:.3f} critic_loss {:.4f}".format(
                    step + 1, r[0], r[1], r[2], r[3]))
                running[:] = 0


def main():
    torch.manual_seed(1)
    rng = np.random.RandomState(1)
    conf = {"lr": 1e-3, "lr_decay_rate": 0.96, "lr_decay_steps": 5000, "steps": 250, "batch_size": 64,
            "max_len": 10, "log_interval": 25}
    agent = Agent()
    Trainer(conf, agent, rng).run()


if __name__ == "__main__":
    main()
