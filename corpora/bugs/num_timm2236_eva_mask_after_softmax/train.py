# Source: huggingface/pytorch-image-models, timm/models/eva.py (EvaAttention, EvaBlock), timm/layers/config.py (use_fused_attn, set_fused_attn), commit 7160af4a24915c1670748728506fe41dad4bb199
# Report: https://github.com/huggingface/pytorch-image-models/pull/2236
# A bag-of-patches classifier built from timm's EVA blocks: each sample is a variable number of
# patch embeddings padded to a fixed length, a class token is prepended, and the key-padding
# mask is passed to every EvaBlock as attn_mask. Fused attention is switched off (as
# set_fused_attn(False) / TIMM_FUSED_ATTN=0 does) so the explicit q @ k^T path is used.
# The patch features are synthetic; the label is whether any valid patch carries a bright
# marker; AdamW, cross-entropy, a few epochs on CPU.
import math
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

_USE_FUSED_ATTN = 1


def use_fused_attn(experimental: bool = False) -> bool:
    if experimental:
        return _USE_FUSED_ATTN > 1
    return _USE_FUSED_ATTN > 0


def set_fused_attn(enable: bool = True, experimental: bool = False):
    global _USE_FUSED_ATTN
    if experimental and enable:
        _USE_FUSED_ATTN = 2
    elif enable:
        _USE_FUSED_ATTN = 1
    else:
        _USE_FUSED_ATTN = 0


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, act_layer=nn.GELU, drop=0.):
        super().__init__()
        hidden_features = hidden_features or in_features
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


class EvaAttention(nn.Module):
    fused_attn: torch.jit.Final[bool]

    def __init__(
            self,
            dim: int,
            num_heads: int = 8,
            qkv_bias: bool = True,
            qkv_fused: bool = True,
            num_prefix_tokens: int = 1,
            attn_drop: float = 0.,
            proj_drop: float = 0.,
            attn_head_dim: Optional[int] = None,
            norm_layer: Optional[Callable] = None,
    ):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        if attn_head_dim is not None:
            head_dim = attn_head_dim
        all_head_dim = head_dim * self.num_heads
        self.scale = head_dim ** -0.5
        self.num_prefix_tokens = num_prefix_tokens
        self.fused_attn = use_fused_attn()

        if qkv_fused:
            self.qkv = nn.Linear(dim, all_head_dim * 3, bias=False)
            self.q_proj = self.k_proj = self.v_proj = None
            if qkv_bias:
                self.q_bias = nn.Parameter(torch.zeros(all_head_dim))
                self.register_buffer('k_bias', torch.zeros(all_head_dim), persistent=False)
                self.v_bias = nn.Parameter(torch.zeros(all_head_dim))
            else:
                self.q_bias = self.k_bias = self.v_bias = None
        else:
            self.q_proj = nn.Linear(dim, all_head_dim, bias=qkv_bias)
            self.k_proj = nn.Linear(dim, all_head_dim, bias=False)
            self.v_proj = nn.Linear(dim, all_head_dim, bias=qkv_bias)
            self.qkv = None
            self.q_bias = self.k_bias = self.v_bias = None

        self.attn_drop = nn.Dropout(attn_drop)
        self.norm = norm_layer(all_head_dim) if norm_layer is not None else nn.Identity()
        self.proj = nn.Linear(all_head_dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(
            self,
            x,
            rope: Optional[torch.Tensor] = None,
            attn_mask: Optional[torch.Tensor] = None,
    ):
        B, N, C = x.shape

        if self.qkv is not None:
            qkv_bias = torch.cat((self.q_bias, self.k_bias, self.v_bias)) if self.q_bias is not None else None
            qkv = F.linear(input=x, weight=self.qkv.weight, bias=qkv_bias)
            qkv = qkv.reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)  # B, num_heads, N, head_dim
        else:
            q = self.q_proj(x).reshape(B, N, self.num_heads, -1).transpose(1, 2)  # B, num_heads, N, C
            k = self.k_proj(x).reshape(B, N, self.num_heads, -1).transpose(1, 2)
            v = self.v_proj(x).reshape(B, N, self.num_heads, -1).transpose(1, 2)

        if self.fused_attn:
            x = F.scaled_dot_product_attention(
                q, k, v,
                attn_mask=attn_mask[:, None, None, :] if attn_mask is not None else None,
                dropout_p=self.attn_drop.p if self.training else 0.,
            )
        else:
            q = q * self.scale
            attn = (q @ k.transpose(-2, -1))
            attn = attn.softmax(dim=-1)
            if attn_mask is not None:
                attn_mask = attn_mask.to(torch.bool)
                attn = attn.masked_fill(~attn_mask[:, None, None, :], float("-inf"))
            attn = self.attn_drop(attn)
            x = attn @ v

        x = x.transpose(1, 2).reshape(B, N, C)
        x = self.norm(x)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class EvaBlock(nn.Module):
    def __init__(self, dim, num_heads, qkv_bias=True, mlp_ratio=4., num_prefix_tokens=1,
                 proj_drop=0., attn_drop=0., init_values=None, act_layer=nn.GELU, norm_layer=nn.LayerNorm):
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = EvaAttention(dim, num_heads=num_heads, qkv_bias=qkv_bias, num_prefix_tokens=num_prefix_tokens,
                                 attn_drop=attn_drop, proj_drop=proj_drop)
        self.gamma_1 = nn.Parameter(init_values * torch.ones(dim)) if init_values is not None else None
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio), act_layer=act_layer, drop=proj_drop)
        self.gamma_2 = nn.Parameter(init_values * torch.ones(dim)) if init_values is not None else None

    def forward(self, x, rope: Optional[torch.Tensor] = None, attn_mask: Optional[torch.Tensor] = None):
        if self.gamma_1 is None:
            x = x + self.attn(self.norm1(x), rope=rope, attn_mask=attn_mask)
            x = x + self.mlp(self.norm2(x))
        else:
            x = x + self.gamma_1 * self.attn(self.norm1(x), rope=rope, attn_mask=attn_mask)
            x = x + self.gamma_2 * self.mlp(self.norm2(x))
        return x


class BagClassifier(nn.Module):
    def __init__(self, in_dim=16, embed_dim=32, depth=2, num_heads=4, num_classes=2):
        super().__init__()
        self.patch_embed = nn.Linear(in_dim, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        nn.init.trunc_normal_(self.cls_token, std=.02)
        self.blocks = nn.ModuleList([EvaBlock(embed_dim, num_heads, init_values=0.1) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, patches, valid):
        x = self.patch_embed(patches)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        attn_mask = torch.cat([torch.ones_like(valid[:, :1]), valid], dim=1)
        for blk in self.blocks:
            x = blk(x, attn_mask=attn_mask)
        return self.head(self.norm(x[:, 0]))


def make_bags(n, max_len, in_dim, rng):
    lengths = rng.randint(4, max_len + 1, size=n)
    patches = rng.normal(0, 1, size=(n, max_len, in_dim)).astype(np.float32)
    valid = np.arange(max_len)[None, :] < lengths[:, None]
    labels = rng.randint(0, 2, size=n)
    for i in range(n):
        if labels[i]:
            patches[i, rng.randint(0, lengths[i]), 0] = 4.0
        else:
            patches[i, :, 0] = np.minimum(patches[i, :, 0], 1.5)
    patches[~valid] = 0.0
    return torch.from_numpy(patches), torch.from_numpy(valid), torch.from_numpy(labels)


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    set_fused_attn(False)  # explicit attention path, as with TIMM_FUSED_ATTN=0
    patches, valid, labels = make_bags(512, 12, 16, rng)
    vpatches, vvalid, vlabels = make_bags(128, 12, 16, rng)
    model = BagClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    batch_size = 32
    for epoch in range(6):
        model.train()
        perm = torch.randperm(len(labels))
        total, n = 0.0, 0
        for i in range(0, len(perm), batch_size):
            idx = perm[i:i + batch_size]
            logits = model(patches[idx], valid[idx])
            loss = F.cross_entropy(logits, labels[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
            n += len(idx)
        model.eval()
        with torch.no_grad():
            vlogits = model(vpatches, vvalid)
            vacc = (vlogits.argmax(-1) == vlabels).float().mean().item()
        w = model.head.weight
        print(f"epoch {epoch} train loss {total / n:.4f} val acc {vacc:.3f} "
              f"head weight finite {torch.isfinite(w).all().item()}")
    assert math.isfinite(vacc)


if __name__ == "__main__":
    main()
