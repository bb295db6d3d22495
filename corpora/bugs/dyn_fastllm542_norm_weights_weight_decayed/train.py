# Source: ServiceNow/Fast-LLM, fast_llm/engine/config_utils/parameter.py (ParameterConfig.get_parameter), fast_llm/layers/common/normalization/normalization.py, fast_llm/engine/multi_stage/stage_base.py (param groups)
# Report: https://github.com/ServiceNow/Fast-LLM/issues/542
# Fast-LLM builds every parameter through ParameterConfig.get_parameter, which tags it with
# param_weight_decay; the optimizer's parameter groups are keyed on that tag
# (weight_decay=None -> the global value, 0.0 -> no decay). A tiny decoder-only LM (embedding,
# 2 blocks of LayerNorm + attention + LayerNorm + MLP, final norm, head) is trained with AdamW on
# synthetic token sequences from a fixed Markov chain; 300 steps on one CPU thread.
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ParameterConfig:
    def __init__(self, init):
        self.init = init

    def get_parameter(self, dims, weight_decay=True):
        param = nn.Parameter(self.init(torch.empty(dims)))
        param.param_weight_decay = weight_decay
        return param


def init_normal(std):
    return lambda t: nn.init.normal_(t, 0.0, std)


def init_ones(t):
    return nn.init.ones_(t)


def init_zeros(t):
    return nn.init.zeros_(t)


class LayerNormalization(nn.Module):
    def __init__(self, hidden, eps=1e-5):
        super().__init__()
        self.weight = ParameterConfig(init_ones).get_parameter((hidden,))
        self.bias = ParameterConfig(init_zeros).get_parameter((hidden,))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class AffineLinear(nn.Module):
    def __init__(self, d_in, d_out, std):
        super().__init__()
        self.weight = ParameterConfig(init_normal(std)).get_parameter((d_out, d_in))
        self.bias = ParameterConfig(init_zeros).get_parameter((d_out,), weight_decay=False)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class Block(nn.Module):
    def __init__(self, hidden, heads, std):
        super().__init__()
        self.norm_1 = LayerNormalization(hidden)
        self.qkv = AffineLinear(hidden, 3 * hidden, std)
        self.dense = AffineLinear(hidden, hidden, std / math.sqrt(2))
        self.norm_2 = LayerNormalization(hidden)
        self.mlp_1 = AffineLinear(hidden, 4 * hidden, std)
        self.mlp_2 = AffineLinear(4 * hidden, hidden, std / math.sqrt(2))
        self.heads = heads

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm_1(x)).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
        x = x + self.dense(a)
        return x + self.mlp_2(F.gelu(self.mlp_1(self.norm_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, hidden, layers, heads, seq):
        super().__init__()
        std = 0.02
        self.word_embeddings = ParameterConfig(init_normal(std)).get_parameter((vocab, hidden))
        self.position_embeddings = ParameterConfig(init_normal(std)).get_parameter((seq, hidden))
        self.blocks = nn.ModuleList([Block(hidden, heads, std) for _ in range(layers)])
        self.final_norm = LayerNormalization(hidden)
        self.output_weights = ParameterConfig(init_normal(std)).get_parameter((vocab, hidden))

    def forward(self, tokens):
        x = self.word_embeddings[tokens] + self.position_embeddings[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return F.linear(self.final_norm(x), self.output_weights)


def get_param_groups(model, weight_decay):
    grouped = {}
    for name, param in model.named_parameters():
        wd = None if param.param_weight_decay else 0.0
        grouped.setdefault(wd, []).append((name, param))
    groups = []
    for wd, named in grouped.items():
        groups.append({"params": [p for _, p in named], "names": [n for n, _ in named],
                       "weight_decay": weight_decay if wd is None else wd})
    return groups


def make_corpus(rng, vocab, n, seq):
    trans = rng.dirichlet(np.full(vocab, 0.15), size=vocab)
    data = np.zeros((n, seq + 1), dtype=np.int64)
    for i in range(n):
        t = rng.randint(vocab)
        for j in range(seq + 1):
            data[i, j] = t
            t = rng.choice(vocab, p=trans[t])
    return torch.from_numpy(data)


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    vocab, hidden, layers, heads, seq = 48, 64, 2, 4, 32
    data = make_corpus(rng, vocab, 512, seq)
    model = GPT(vocab, hidden, layers, heads, seq)

    groups = get_param_groups(model, weight_decay=0.1)
    for g in groups:
        norm_tensors = sum("norm" in n for n in g["names"])
        print("param group weight_decay={}: {} tensors ({} normalization)".format(
            g["weight_decay"], len(g["params"]), norm_tensors))
    optimizer = torch.optim.AdamW([{k: v for k, v in g.items() if k != "names"} for g in groups],
                                  lr=3e-3, betas=(0.9, 0.95))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: min(1.0, (it + 1) / 30))

    train_iters, batch_size = 300, 32
    for it in range(train_iters):
        idx = torch.randint(0, data.shape[0], (batch_size,))
        batch = data[idx]
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), batch[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if it % 50 == 0 or it == train_iters - 1:
            norm_w = torch.cat([m.weight.detach() for m in model.modules() if isinstance(m, LayerNormalization)])
            norm_b = torch.cat([m.bias.detach() for m in model.modules() if isinstance(m, LayerNormalization)])
            print("iter {:3d} loss {:.4f} | norm weight mean {:.4f} min {:.4f} | norm bias mean|.| {:.4f}".format(
                it, loss.item(), norm_w.mean().item(), norm_w.min().item(), norm_b.abs().mean().item()))


if __name__ == "__main__":
    main()
