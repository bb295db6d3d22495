"""Tiny real models, each named after the fault it raises in forward (issue 2 §4).

Each faulty line carries a `# BUG` marker; tests find its line number with `bug_line`.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn as nn


def bug_line(cls: type) -> int:
    """The line number of the `# BUG` marker in `cls`'s source."""
    lines, start = inspect.getsourcelines(cls)
    for i, text in enumerate(lines):
        if "# BUG" in text:
            return start + i
    raise AssertionError(f"{cls.__name__} has no # BUG marker")


class CleanMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return self.body(x)


class WrongInFeatures(nn.Module):
    """The head expects 32 features; the encoder gives 16."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        h = self.encoder(x)
        return self.head(h)  # BUG


class ResidualWidthMismatch(nn.Module):
    """A residual add of a 8-wide input and a 16-wide branch."""

    def __init__(self) -> None:
        super().__init__()
        self.branch = nn.Linear(8, 16)

    def forward(self, x):
        return x + self.branch(x)  # BUG


class ConcatWrongAxis(nn.Module):
    """Concatenates features along the batch axis instead of the feature axis."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 4)
        self.b = nn.Linear(8, 6)

    def forward(self, x):
        return torch.cat([self.a(x), self.b(x)], dim=0)  # BUG


class StackRagged(nn.Module):
    def forward(self, x):
        return torch.stack([x, x[:-1]])  # BUG


class ViewFixedBatch(nn.Module):
    """Reshapes with a hard-coded batch size."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x).view(32, 2, 4)  # BUG


class BatchNormOneSample(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.norm = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.norm(self.fc(x))  # BUG


class EmbeddingFloatIds(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)

    def forward(self, ids):
        return self.embed(ids)  # BUG


class FlattenAfterTranspose(nn.Module):
    """view() after transpose: the layout does not allow it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):  # x: (B, T, 4)
        h = self.proj(x).transpose(1, 2)
        return h.view(x.shape[0], -1)  # BUG


class ChannelsLastFlatten(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        h = self.conv(x.to(memory_format=torch.channels_last))
        return h.view(h.shape[0], -1)  # BUG


class SigmoidThenInplace(nn.Module):
    """Scales the output of a sigmoid in place; sigmoid saved it for backward."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 1)

    def forward(self, x):
        y = torch.sigmoid(self.fc(x))
        y.mul_(2)
        return y


class HugeAttentionScores(nn.Module):
    """Allocates (T, T) scores for a sequence that was never truncated."""

    def forward(self, x):
        t = 1 << 24
        return torch.empty(t, t)  # BUG


# Training steps whose fault sits outside forward (loss, backward). Each returns nothing;
# the faulty line carries the marker.


def ce_with_column_target(model, x):
    y = torch.zeros(x.shape[0], 1, dtype=torch.long)
    return nn.functional.cross_entropy(model(x), y)  # BUG


def ce_with_float_target(model, x):
    y = torch.zeros(x.shape[0])
    return nn.functional.cross_entropy(model(x), y)  # BUG


def ce_with_other_batch(model, x):
    y = torch.zeros(x.shape[0] + 1, dtype=torch.long)
    return nn.functional.cross_entropy(model(x), y)  # BUG


def loss_rebuilt_from_item(model, x):
    loss = model(x).pow(2).mean()
    loss = torch.tensor(loss.item())
    loss.backward()  # BUG


def backward_through_saved_inplace(model, x):
    model(x).sum().backward()  # BUG


def hidden_state_kept_across_steps(model, x):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    h = torch.zeros(x.shape[0], 16)
    for _ in range(2):
        h = torch.tanh(model.body[0](x) + h)
        loss = h.pow(2).mean()
        opt.zero_grad()
        loss.backward()  # BUG
        opt.step()


step_bug_line = bug_line


class _Attn(nn.Module):
    def __init__(self, d: int, dk: int) -> None:
        super().__init__()
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, dk)

    def forward(self, x):
        q, k = self.q(x), self.k(x)
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ x  # BUG


class _Block(nn.Module):
    def __init__(self, d: int, dk: int) -> None:
        super().__init__()
        self.attn = _Attn(d, dk)

    def forward(self, x):
        return x + self.attn(x)


class ThirdBlockKeyWidth(nn.Module):
    """Blocks in a ModuleList, heads in a ModuleDict; only the third block's key projection is too
    narrow, so the fault is in `blocks.2.attn`, not in blocks 0 and 1 of the same class."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([_Block(8, 8), _Block(8, 8), _Block(8, 6)])
        self.heads = nn.ModuleDict({"cls": nn.Linear(8, 2), "box": nn.Linear(6, 4)})

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.heads["cls"](x)


class BoxHeadInFeatures(ThirdBlockKeyWidth):
    """Same blocks (all fine); the ModuleDict's "box" head expects 6 features, gets 8."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([_Block(8, 8) for _ in range(3)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.heads["cls"](x), self.heads["box"](x)  # BUG
