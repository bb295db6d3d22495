# Source: huggingface/pytorch-image-models, timm/models/layers/bottleneck_attn.py (rel_logits_1d, PosEmbedRel, BottleneckAttn), commit 80075b0b8a4372c6be82ff4dc88517572d91b94a
# Report: https://github.com/huggingface/pytorch-image-models/commit/b81e79aae9579a6868e139780ad064d73693c2d3
# timm's Bottleneck Self Attention (BoTNet) layer used as the global-context stage of a small
# dense-prediction network: a conv stem brings 32x32 images to an 8x8x32 feature map, a
# BottleneckAttn layer (4 heads, relative position embedding) mixes it globally, and a 1x1-conv
# head predicts a per-cell foreground logit, upsampled to the image. The images are synthetic
# (bright disks on noise), the loss is BCE-with-logits, Adam; validation reports the foreground IoU.
from typing import List

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.init import trunc_normal_


def to_2tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x, x)



def rel_logits_1d(q, rel_k, permute_mask: List[int]):
    """ Compute relative logits along one dimension

    As per: https://gist.github.com/aravindsrinivas/56359b79f0ce4449bcb04ab4b56a57a2
    Originally from: `Attention Augmented Convolutional Networks` - https://arxiv.org/abs/1904.09925

    Args:
        q: (batch, heads, height, width, dim)
        rel_k: (2 * width - 1, dim)
        permute_mask: permute output dim according to this
    """
    B, H, W, dim = q.shape
    x = (q @ rel_k.transpose(-1, -2))
    x = x.reshape(-1, W, 2 * W -1)

    # pad to shift from relative to absolute indexing
    x_pad = F.pad(x, [0, 1]).flatten(1)
    x_pad = F.pad(x_pad, [0, W - 1])

    # reshape and slice out the padded elements
    x_pad = x_pad.reshape(-1, W + 1, 2 * W - 1)
    x = x_pad[:, :W, W - 1:]

    # reshape and tile
    x = x.reshape(B, H, 1, W, W).expand(-1, -1, H, -1, -1)
    return x.permute(permute_mask)


class PosEmbedRel(nn.Module):
    """ Relative Position Embedding
    As per: https://gist.github.com/aravindsrinivas/56359b79f0ce4449bcb04ab4b56a57a2
    Originally from: `Attention Augmented Convolutional Networks` - https://arxiv.org/abs/1904.09925
    """
    def __init__(self, feat_size, dim_head, scale):
        super().__init__()
        self.height, self.width = to_2tuple(feat_size)
        self.dim_head = dim_head
        self.scale = scale
        self.height_rel = nn.Parameter(torch.randn(self.height * 2 - 1, dim_head) * self.scale)
        self.width_rel = nn.Parameter(torch.randn(self.width * 2 - 1, dim_head) * self.scale)

    def forward(self, q):
        B, num_heads, HW, _ = q.shape

        # relative logits in width dimension.
        q = q.reshape(B * num_heads, self.height, self.width, -1)
        rel_logits_w = rel_logits_1d(q, self.width_rel, permute_mask=(0, 1, 3, 2, 4))

        # relative logits in height dimension.
        q = q.transpose(1, 2)
        rel_logits_h = rel_logits_1d(q, self.height_rel, permute_mask=(0, 3, 1, 4, 2))

        rel_logits = rel_logits_h + rel_logits_w
        rel_logits = rel_logits.reshape(B, num_heads, HW, HW)
        return rel_logits


class BottleneckAttn(nn.Module):
    """ Bottleneck Attention
    Paper: `Bottleneck Transformers for Visual Recognition` - https://arxiv.org/abs/2101.11605
    """
    def __init__(self, dim, dim_out=None, feat_size=None, stride=1, num_heads=4, qkv_bias=False):
        super().__init__()
        assert feat_size is not None, 'A concrete feature size matching expected input (H, W) is required'
        dim_out = dim_out or dim
        assert dim_out % num_heads == 0
        self.num_heads = num_heads
        self.dim_out = dim_out
        self.dim_head = dim_out // num_heads
        self.scale = self.dim_head ** -0.5

        self.qkv = nn.Conv2d(dim, self.dim_out * 3, 1, bias=qkv_bias)

        # NOTE I'm only supporting relative pos embedding for now
        self.pos_embed = PosEmbedRel(feat_size, dim_head=self.dim_head, scale=self.scale)

        self.pool = nn.AvgPool2d(2, 2) if stride == 2 else nn.Identity()

        self.reset_parameters()

    def reset_parameters(self):
        trunc_normal_(self.qkv.weight, std=self.qkv.weight.shape[1] ** -0.5)
        trunc_normal_(self.pos_embed.height_rel, std=self.scale)
        trunc_normal_(self.pos_embed.width_rel, std=self.scale)

    def forward(self, x):
        B, C, H, W = x.shape
        assert H == self.pos_embed.height
        assert W == self.pos_embed.width

        x = self.qkv(x)  # B, 3 * num_heads * dim_head, H, W
        x = x.reshape(B, -1, self.dim_head, H * W).transpose(-1, -2)
        q, k, v = torch.split(x, self.num_heads, dim=1)

        attn_logits = (q @ k.transpose(-1, -2)) * self.scale
        attn_logits = attn_logits + self.pos_embed(q)  # B, num_heads, H * W, H * W

        attn_out = attn_logits.softmax(dim=-1)
        attn_out = (attn_out @ v).transpose(1, 2).reshape(B, self.dim_out, H, W)  # B, dim_out, H, W
        attn_out = self.pool(attn_out)
        return attn_out


class SegNet(nn.Module):
    def __init__(self, width=32, feat_size=8):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(1, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, width, 3, stride=2, padding=1), nn.BatchNorm2d(width), nn.ReLU())
        self.attn = BottleneckAttn(width, width, feat_size=feat_size, num_heads=4)
        self.norm = nn.BatchNorm2d(width)
        self.head = nn.Conv2d(width, 1, 1)

    def forward(self, x):
        feat = self.attn(self.stem(x))
        logits = self.head(F.relu(self.norm(feat)))
        return F.interpolate(logits, scale_factor=4, mode="bilinear", align_corners=False)


def make_data(n, rng, size=32):
    yy, xx = np.mgrid[0:size, 0:size]
    images = rng.normal(0, 0.5, size=(n, 1, size, size)).astype(np.float32)
    masks = np.zeros((n, 1, size, size), np.float32)
    for i in range(n):
        for _ in range(rng.randint(1, 3)):
            cy, cx = rng.uniform(4, size - 4, size=2)
            r = rng.uniform(3, 7)
            masks[i, 0] = np.maximum(masks[i, 0], ((yy - cy) ** 2 + (xx - cx) ** 2 <= r * r))
        images[i, 0] += 1.5 * masks[i, 0]
    return torch.from_numpy(images), torch.from_numpy(masks)


def iou(logits, masks):
    pred = (logits > 0).float()
    inter = (pred * masks).sum().item()
    union = ((pred + masks) > 0).float().sum().item()
    return inter / max(union, 1.0)


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    x_train, y_train = make_data(256, rng)
    x_val, y_val = make_data(64, rng)
    model = SegNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(8):
        model.train()
        perm = torch.randperm(len(x_train))
        total = 0.0
        for i in range(0, len(perm), 16):
            idx = perm[i:i + 16]
            loss = F.binary_cross_entropy_with_logits(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        model.eval()
        with torch.no_grad():
            val_logits = model(x_val)
            val_loss = F.binary_cross_entropy_with_logits(val_logits, y_val).item()
        print(f"epoch {epoch} train loss {total / len(perm):.4f} val loss {val_loss:.4f} val IoU {iou(val_logits, y_val):.3f}")


if __name__ == "__main__":
    main()
