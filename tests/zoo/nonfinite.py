"""Tiny models whose first non-finite value is known: each class is named after its bug."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F


class LogOfReluDeepInside(nn.Module):
    """log() of a ReLU output (exact zeros) in block.1.act: -inf, then NaN in the head."""

    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 8), nn.Sequential(nn.ReLU(), LogAct()))
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.block(x))


class LogAct(nn.Module):
    def forward(self, x):
        return torch.log(x)  # BUG: log(0) for the zeros the ReLU made


class SqrtAtZeroInBackward(nn.Module):
    """sqrt of a squared distance that is 0: forward finite, d sqrt/dx = inf at 0 → NaN grads."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.dist = PairDistance()
        self.head = nn.Linear(1, 1)

    def forward(self, x):
        h = self.proj(x)
        return self.head(self.dist(h, h.detach() * 0 + h.detach()))


class PairDistance(nn.Module):
    def forward(self, a, b):
        return torch.sqrt(((a - b) ** 2).sum(-1, keepdim=True))  # BUG: no eps, distance 0


class ProbabilityNet(nn.Module):
    """Outputs probabilities with exact zeros (a ReLU then a normalization)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        p = F.relu(self.fc(x))
        return p / (p.sum(-1, keepdim=True) + 1e-6)


class HalfPrecisionOverflow(nn.Module):
    """float16 activations: x * 1000 squared exceeds 65504."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.energy = Energy()

    def forward(self, x):
        return self.energy(self.fc(x)).sum(-1, keepdim=True)


class Energy(nn.Module):
    def forward(self, h):
        return (h * 1000) ** 2  # BUG: past float16's 65504


class MaskedAttention(nn.Module):
    """Single-head attention with a boolean key mask filled with -inf before softmax."""

    def __init__(self, d=8):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.attn = ScoreSoftmax()
        self.out = nn.Linear(d, 1)

    def forward(self, x, key_mask):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        w = self.attn(scores, key_mask)
        return self.out(w @ v).mean(1)


class ScoreSoftmax(nn.Module):
    def forward(self, scores, key_mask):
        scores = scores.masked_fill(~key_mask[:, None, :], float("-inf"))
        return torch.softmax(scores, dim=-1)


class RichOutputs(nn.Module):
    """Returns a tuple with a dict, None, an int, a bool tensor and a complex tensor; shares a weight."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(self.fc(x))  # weight sharing: the same module twice
        return h.sum(-1, keepdim=True), {"aux": h, "none": None, "n": 3, "mask": h > 0,
                                          "spec": torch.complex(h, h)}


class CheckpointedMLP(nn.Module):
    """Activation checkpointing: the block's forward is recomputed in backward."""

    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.block, x, use_reentrant=False)


class ExpOverflowInNestedBlocks(nn.Module):
    """exp overflow born in stages["enc"][1] (a ModuleList inside a ModuleDict); enc.2 and head only
    propagate the +Inf; returns a dict."""

    def __init__(self):
        super().__init__()
        self.stages = nn.ModuleDict({"enc": nn.ModuleList([PlainBlock(), ExpBlock(), PlainBlock()])})
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        for block in self.stages["enc"]:
            x = block(x)
        return {"out": self.head(x), "hidden": x}


class PlainBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x)


class ExpBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.exp(self.fc(x) * 100)  # BUG: exp of scores far above 88.7


class SharedLayerSqrtOfNegative(nn.Module):
    """The same Linear called twice (weight sharing), then sqrt of a shifted negative: NaN at the root."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(torch.tanh(self.fc(x)))
        return torch.sqrt(h - 5).sum(-1, keepdim=True)  # BUG: sqrt of a negative number


class CheckpointedZeroDivision(nn.Module):
    """A checkpointed block (recomputed in backward) whose Div makes 0/0."""

    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), SelfDivision())
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        return self.head(checkpoint(self.block, x, use_reentrant=False))


class SelfDivision(nn.Module):
    def forward(self, x):
        return x / (x - x)  # BUG: division by zero


@dataclasses.dataclass
class Prediction:
    value: torch.Tensor
    features: torch.Tensor


class DataclassOutputLogOfNegative(nn.Module):
    """Returns a dataclass; log of a negative number in module `act`."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = LogAct()
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        h = self.fc(x)
        return Prediction(self.head(self.act(h - 10)), h)


class MultiheadAttentionNet(nn.Module):
    """nn.MultiheadAttention with a key padding mask (True = padding)."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = nn.Linear(8, 1)

    def forward(self, x, key_padding_mask):
        o, _ = self.attn(x, x, x, key_padding_mask=key_padding_mask)
        return self.head(o).mean(1)


class SdpaAttentionNet(nn.Module):
    """F.scaled_dot_product_attention with a -inf additive mask built from a keep mask."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.head = nn.Linear(8, 1)

    def forward(self, x, keep):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        bias = torch.zeros(keep.shape, dtype=x.dtype).masked_fill(~keep, float("-inf"))[:, None, :]
        return self.head(F.scaled_dot_product_attention(q, k, v, attn_mask=bias)).mean(1)


class ExpUnderBfloat16Autocast(nn.Module):
    """Under CPU autocast bfloat16 the Linear runs in bfloat16; exp of 30x its output overflows."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        h = self.fc(x)
        return self.head(torch.exp(h * 30))  # BUG: exp overflows past 88.7


def hand_written_cross_entropy(p, y_onehot):
    return -(y_onehot * torch.log(p)).sum(1).mean()  # BUG: log(0) where the net output a zero
