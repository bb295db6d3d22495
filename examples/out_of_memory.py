"""Memory fault: attention scores for a sequence that was never truncated, (T, T) with T = 2**24."""

import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):  # x: (T, dim)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        seq = 1 << 24  # the length of the whole, untruncated document
        scores = torch.empty(seq, seq)  # 2**48 floats: no machine holds this
        return scores[: x.shape[0], : x.shape[0]] @ v


model = Attention()
out = model(torch.randn(16, 8))
out.sum().backward()
