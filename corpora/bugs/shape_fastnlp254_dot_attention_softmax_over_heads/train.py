# Source: fastnlp/fastNLP, fastNLP/modules/encoder/attention.py, commit 202bde4bfd3ac26e1155f7f6e2c6e021b5cfa3d7
# Report: https://github.com/FudanNLP/fastNLP/issues/254
# A small Transformer-style encoder built on fastNLP's MultiHeadAttention / DotAttention, trained on a
# pointer task: token 0 of each sequence names a position, and the class is the token found there.
import math

import torch
import torch.nn.functional as F
from torch import nn


class DotAttention(nn.Module):
    """
    .. todo::
        补上文档
    """

    def __init__(self, key_size, value_size, dropout=0.0):
        super(DotAttention, self).__init__()
        self.key_size = key_size
        self.value_size = value_size
        self.scale = math.sqrt(key_size)
        self.drop = nn.Dropout(dropout)
        self.softmax = nn.Softmax(dim=2)

    def forward(self, Q, K, V, mask_out=None):
        """

        :param Q: [..., seq_len_q, key_size]
        :param K: [..., seq_len_k, key_size]
        :param V: [..., seq_len_k, value_size]
        :param mask_out: [..., 1, seq_len] or [..., seq_len_q, seq_len_k]
        """
        output = torch.matmul(Q, K.transpose(-1, -2)) / self.scale
        if mask_out is not None:
            output.masked_fill_(mask_out, -1e9)
        output = self.softmax(output)
        output = self.drop(output)
        return torch.matmul(output, V)


class MultiHeadAttention(nn.Module):
    """

    """

    def __init__(self, input_size, key_size, value_size, num_head, dropout=0.1):
        super(MultiHeadAttention, self).__init__()
        self.input_size = input_size
        self.key_size = key_size
        self.value_size = value_size
        self.num_head = num_head

        in_size = key_size * num_head
        self.q_in = nn.Linear(input_size, in_size)
        self.k_in = nn.Linear(input_size, in_size)
        self.v_in = nn.Linear(input_size, in_size)
        self.attention = DotAttention(key_size=key_size, value_size=value_size, dropout=dropout)
        self.out = nn.Linear(value_size * num_head, input_size)
        self.reset_parameters()

    def reset_parameters(self):
        sqrt = math.sqrt
        nn.init.normal_(self.q_in.weight, mean=0, std=sqrt(1.0 / self.input_size))
        nn.init.normal_(self.k_in.weight, mean=0, std=sqrt(1.0 / self.input_size))
        nn.init.normal_(self.v_in.weight, mean=0, std=sqrt(1.0 / self.input_size))
        nn.init.normal_(self.out.weight, mean=0, std=sqrt(1.0 / self.input_size))

    def forward(self, Q, K, V, atte_mask_out=None):
        """

        :param Q: [batch, seq_len_q, model_size]
        :param K: [batch, seq_len_k, model_size]
        :param V: [batch, seq_len_k, model_size]
        :param seq_mask: [batch, seq_len]
        """
        batch, sq, _ = Q.size()
        sk = K.size(1)
        d_k, d_v, n_head = self.key_size, self.value_size, self.num_head
        # input linear
        q = self.q_in(Q).view(batch, sq, n_head, d_k).transpose(1, 2)
        k = self.k_in(K).view(batch, sk, n_head, d_k).transpose(1, 2)
        v = self.v_in(V).view(batch, sk, n_head, d_v).transpose(1, 2)

        if atte_mask_out is not None:
            atte_mask_out = atte_mask_out[:,None,:,:] # [bsz,1,1,len]
        atte = self.attention(q, k, v, atte_mask_out).view(batch, n_head, sq, d_v)

        # concat all heads, do output linear
        atte = atte.transpose(1, 2).contiguous().view(batch, sq, -1)
        output = self.out(atte)
        return output


class PointerClassifier(nn.Module):
    def __init__(self, vocab, seq_len, model_size=32, num_head=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, model_size)
        self.pos = nn.Embedding(seq_len, model_size)
        self.attn = MultiHeadAttention(model_size, model_size // num_head, model_size // num_head, num_head, dropout=0.0)
        self.norm = nn.LayerNorm(model_size)
        self.cls = nn.Linear(model_size, vocab)

    def forward(self, words):
        x = self.embed(words) + self.pos(torch.arange(words.size(1)))[None]
        atte_mask_out = words.eq(0)[:, None, :]
        x = self.norm(x + self.attn(x, x, x, atte_mask_out))
        return self.cls(x[:, 0])


def make_batch(g, n, vocab=48, seq_len=16):
    words = torch.randint(seq_len, vocab, (n, seq_len), generator=g)
    pointer = torch.randint(1, seq_len, (n,), generator=g)
    words[:, 0] = pointer
    target = words[torch.arange(n), pointer]
    lengths = torch.maximum(pointer + 1, torch.randint(2, seq_len + 1, (n,), generator=g))
    words[torch.arange(seq_len)[None] >= lengths[:, None]] = 0
    return words, target


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = PointerClassifier(vocab=48, seq_len=16)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    val_words, val_target = make_batch(g, 1000)
    for step in range(601):
        words, target = make_batch(g, 64)
        loss = F.cross_entropy(model(words), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            with torch.no_grad():
                acc = (model(val_words).argmax(1) == val_target).float().mean().item()
                x = model.embed(val_words) + model.pos(torch.arange(val_words.size(1)))[None]
                attn = model.attn
                q = attn.q_in(x).view(len(x), -1, attn.num_head, attn.key_size).transpose(1, 2)
                k = attn.k_in(x).view(len(x), -1, attn.num_head, attn.key_size).transpose(1, 2)
                scores = torch.matmul(q, k.transpose(-1, -2)) / attn.attention.scale
                scores.masked_fill_(val_words.eq(0)[:, None, None, :], -1e9)
                weights = attn.attention.softmax(scores)
                row_sum = weights[:, :, 0].sum(-1)
                pad_mass = (weights * val_words.eq(0)[:, None, None, :]).sum(-1).mean().item()
            print(f"step {step} loss {loss.item():.4f} val accuracy {acc:.3f} (chance {1 / 32:.3f}) "
                  f"query-0 attention row sum min {row_sum.min().item():.3f} max {row_sum.max().item():.3f} weight on padding {pad_mass:.3f}")


if __name__ == "__main__":
    main()
