# Source: NVIDIA/Megatron-LM, megatron/model/transformer.py (FlashSelfAttention), mid-2023
# Report: https://github.com/NVIDIA/Megatron-LM/pull/411
# Megatron's FlashSelfAttention inside a small GPT (ParallelAttention reduced to a plain
# qkv projection), trained with periodic evaluation as in megatron/training.py
# (evaluate_and_print_results puts the model in eval mode and back). flash_attn's varlen
# kernel is emulated with scaled_dot_product_attention on the same packed (b*s, h, d)
# layout; data is a synthetic token stream.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def rearrange_bs(x, batch_size=None):
    if batch_size is None:
        return x.reshape(-1, *x.shape[2:])
    return x.reshape(batch_size, -1, *x.shape[1:])


def flash_attn_unpadded_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                             softmax_scale=None, causal=False):
    b = cu_seqlens_q.numel() - 1
    q, k, v = (x.reshape(b, -1, *x.shape[1:]).transpose(1, 2) for x in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=causal, scale=softmax_scale)
    return out.transpose(1, 2).reshape(-1, *out.shape[1:2], out.shape[-1])


class FlashSelfAttention(torch.nn.Module):
    """Implement the scaled dot product attention with softmax.
    Arguments
    ---------
        softmax_scale: The temperature to use for the softmax attention.
                      (default: 1/sqrt(d_keys) where d_keys is computed at
                      runtime)
        attention_dropout: The dropout rate to apply to the attention
                           (default: 0.0)
    """
    def __init__(self, causal=False, softmax_scale=None, attention_dropout=0.0,
                 device=None, dtype=None):
        super().__init__()
        self.causal = causal
        self.softmax_scale = softmax_scale
        self.dropout_p = attention_dropout

    def forward(self, q, k, v):
        """Implements the multihead softmax attention.
        Arguments
        ---------
            q, k, v: The tensor containing the query, key, and value. (B, S, H, D)
        """
        batch_size, seqlen_q = q.shape[0], q.shape[1]
        seqlen_k = k.shape[1]

        q, k, v = [rearrange_bs(x) for x in [q, k, v]]
        cu_seqlens_q = torch.arange(0, (batch_size + 1) * seqlen_q, step=seqlen_q, dtype=torch.int32,
                                    device=q.device)

        if self.training:
            # during training q,k,v always have same seqlen
            assert seqlen_k == seqlen_q

            is_causal = self.causal
            cu_seqlens_k = cu_seqlens_q
        else:
            # turn off FA causal mask after first inference autoregressive iteration
            # only on first autoregressive step q,k,v have same seqlen
            is_causal = seqlen_q == seqlen_k
            cu_seqlens_k = torch.arange(0, (batch_size + 1) * seqlen_k, step=seqlen_k, dtype=torch.int32,
                        device=q.device)
            self.dropout_p = 0

        output = flash_attn_unpadded_func(
            q, k, v, cu_seqlens_q, cu_seqlens_k, seqlen_q, seqlen_k,
            self.dropout_p,
            softmax_scale=self.softmax_scale, causal=is_causal
        )

        output = rearrange_bs(output, batch_size)
        return output


class ParallelTransformerLayer(nn.Module):
    def __init__(self, hidden, heads, attention_dropout):
        super().__init__()
        self.heads = heads
        self.input_layernorm = nn.LayerNorm(hidden)
        self.query_key_value = nn.Linear(hidden, 3 * hidden)
        self.core_attention_flash = FlashSelfAttention(causal=True, attention_dropout=attention_dropout)
        self.dense = nn.Linear(hidden, hidden)
        self.post_attention_layernorm = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def forward(self, x):
        b, s, h = x.shape
        qkv = self.query_key_value(self.input_layernorm(x)).view(b, s, 3, self.heads, h // self.heads)
        ctx = self.core_attention_flash(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
        x = x + self.dense(ctx.reshape(b, s, h))
        return x + self.mlp(self.post_attention_layernorm(x))


class GPTModel(nn.Module):
    def __init__(self, vocab, hidden=64, heads=4, layers=2, seq=32, attention_dropout=0.5):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(seq, hidden)
        self.layers = nn.ModuleList([ParallelTransformerLayer(hidden, heads, attention_dropout) for _ in range(layers)])
        self.final_layernorm = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab)

    def forward(self, tokens, labels):
        x = self.word_embeddings(tokens) + self.position_embeddings(torch.arange(tokens.shape[1]))
        for layer in self.layers:
            x = layer(x)
        logits = self.lm_head(self.final_layernorm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def get_batch(data, batch_size, seq, g):
    ix = torch.randint(0, len(data) - seq - 1, (batch_size,), generator=g)
    x = torch.stack([data[i:i + seq] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + seq] for i in ix])
    return x, y


def evaluate(model, data, g, eval_iters=8):
    model.eval()
    losses = []
    with torch.no_grad():
        for _ in range(eval_iters):
            losses.append(model(*get_batch(data, 32, 32, g)).item())
    model.train()
    return sum(losses) / len(losses)


def main():
    torch.manual_seed(1234)
    g = torch.Generator().manual_seed(0)
    vocab = 96
    trans = torch.softmax(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(5)) * 2.5, -1)
    stream = [0]
    for _ in range(2500 + 4000):
        stream.append(int(torch.multinomial(trans[stream[-1]], 1, generator=g)))
    stream = torch.tensor(stream)
    train_data, valid_data = stream[:2500], stream[2500:]
    model = GPTModel(vocab)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    model.train()
    for iteration in range(1, 401):
        loss = model(*get_batch(train_data, 16, 32, g))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if iteration % 50 == 0:
            val = evaluate(model, valid_data, g)
            print(f"iteration {iteration:4d} lm loss {loss.item():.4f} validation lm loss {val:.4f} "
                  f"PPL {math.exp(val):.2f}")


if __name__ == "__main__":
    main()
