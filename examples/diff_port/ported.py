import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class CausalSelfAttention(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True: a future token
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.proj(y)


model = nn.Sequential(nn.Embedding(50, 32), CausalSelfAttention(), nn.Linear(32, 50))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens = torch.randint(0, 50, (8, 17))
for step in range(100):
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, 50), tokens[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
