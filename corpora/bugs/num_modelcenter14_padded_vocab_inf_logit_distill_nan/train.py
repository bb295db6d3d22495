# Source: OpenBMB/ModelCenter, model_center/model/gpt2.py, configs/gpt2/gpt2-base/config.json, commit 28073f24a67f6c0beb4fd5e2cd13284f9de2284a
# Report: https://github.com/OpenBMB/ModelCenter/issues/14
# Knowledge distillation between two ModelCenter-style GPT2 models (tied input/output embedding,
# vocabulary padded to an even size). The teacher is first trained with cross entropy on a
# synthetic Markov-chain corpus; the student then learns from the hard labels plus the
# teacher's soft distribution. bmtrain's distributed layers are replaced by torch.nn ones, the
# 12-layer 768-wide model by 2 / 1 layers of width 64 / 32, and the vocabulary by 51 tokens.
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Embedding(nn.Module):
    def __init__(self, vocab_size, embedding_size, init_std=1.0):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, embedding_size).normal_(0.0, init_std))

    def forward(self, ids):
        return F.embedding(ids, self.weight)

    def projection(self, x):
        return F.linear(x / math.sqrt(self.weight.size(1)), self.weight)


class Encoder(nn.Module):
    def __init__(self, num_layers, dim_model, num_heads, dim_ff, dropout_p):
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim_model, num_heads, dim_ff, dropout_p, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.output_layernorm = nn.LayerNorm(dim_model)

    def forward(self, hidden_states, causal_mask):
        return self.output_layernorm(self.layers(hidden_states, mask=causal_mask))


class GPT2(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.encoder = Encoder(config["num_layers"], config["dim_model"], config["num_heads"],
                               config["dim_ff"], config["dropout_p"])
        self.embed_dropout = nn.Dropout(config["dropout_p"])
        self.input_embedding = Embedding(config["vocab_size"], config["dim_model"], config["emb_init_std"])
        self.position_embedding = Embedding(config["position_size"], config["dim_model"], 0.02)
        self.tied = config["tied"]

    def forward(self, input_ids):
        batch, seq_length = input_ids.shape
        with torch.no_grad():
            causal_mask = torch.triu(torch.full((seq_length, seq_length), float("-inf")), diagonal=1)
            position_ids = torch.arange(seq_length)[None, :].repeat(batch, 1)
        hidden_states = self.input_embedding(input_ids)
        hidden_states = hidden_states + self.position_embedding(position_ids)
        hidden_states = self.embed_dropout(hidden_states)
        hidden_states = self.encoder(hidden_states, causal_mask)

        if self.tied:
            logits = self.input_embedding.projection(hidden_states)
            logits[:, :, -1] = -float("inf") # TODO not an elegant implementation, gpt2 vocab is odd number, expand to even and ignore last
        return logits


def gpt2_config(num_layers, dim_model):
    return {
        "vocab_size": 52,
        "position_size": 64,
        "dim_model": dim_model,
        "num_heads": 4,
        "dim_ff": 4 * dim_model,
        "num_layers": num_layers,
        "dropout_p": 0.1,
        "emb_init_std": 1.0,
        "tied": True,
    }


NUM_TOKENS = 51


def make_corpus(n_seq, seq_len, trans, rng):
    seqs = np.zeros((n_seq, seq_len + 1), dtype=np.int64)
    seqs[:, 0] = rng.randint(NUM_TOKENS, size=n_seq)
    for t in range(1, seq_len + 1):
        for i in range(n_seq):
            seqs[i, t] = rng.choice(NUM_TOKENS, p=trans[seqs[i, t - 1]])
    return torch.from_numpy(seqs)


def lm_loss(logits, targets):
    vocab = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))


def distill_loss(logits_s, logits_t):
    vocab = logits_s.size(-1)
    prob_t = F.softmax(logits_t.reshape(-1, vocab), dim=-1)
    log_prob_s = F.log_softmax(logits_s.reshape(-1, vocab), dim=-1)
    return -(prob_t * log_prob_s).sum(dim=1).mean()


@torch.no_grad()
def evaluate(model, data):
    model.eval()
    loss = lm_loss(model(data[:, :-1]), data[:, 1:]).item()
    model.train()
    return loss


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    trans = rng.dirichlet(np.full(NUM_TOKENS, 0.1), size=NUM_TOKENS)
    train_data = make_corpus(512, 32, trans, rng)
    valid_data = make_corpus(64, 32, trans, rng)

    teacher = GPT2(gpt2_config(num_layers=2, dim_model=64))
    student = GPT2(gpt2_config(num_layers=1, dim_model=32))

    # 1. teacher: plain language modelling
    opt_t = torch.optim.Adam(teacher.parameters(), lr=1e-3)
    for step in range(150):
        idx = torch.randint(0, train_data.size(0), (32,))
        batch = train_data[idx]
        loss = lm_loss(teacher(batch[:, :-1]), batch[:, 1:])
        opt_t.zero_grad()
        loss.backward()
        opt_t.step()
        if step % 50 == 49:
            print(f"teacher step {step} loss {loss.item():.4f}")
    print(f"teacher valid loss {evaluate(teacher, valid_data):.4f}")
    teacher.eval()

    # 2. student: hard labels + teacher's soft distribution
    opt_s = torch.optim.Adam(student.parameters(), lr=1e-3)
    alpha = 0.5
    for step in range(150):
        idx = torch.randint(0, train_data.size(0), (32,))
        batch = train_data[idx]
        logits_s = student(batch[:, :-1])
        with torch.no_grad():
            logits_t = teacher(batch[:, :-1])
        ce = lm_loss(logits_s, batch[:, 1:])
        d_loss = distill_loss(logits_s, logits_t)
        loss = (1 - alpha) * ce + alpha * d_loss
        opt_s.zero_grad()
        loss.backward()
        opt_s.step()
        if step % 30 == 0 or step == 149:
            print(f"step {step:3d} loss {loss.item():.4f} ce {ce.item():.4f} d_loss {d_loss.item():.4f} "
                  f"student valid loss {evaluate(student, valid_data):.4f}")


if __name__ == "__main__":
    main()
