"""Tiny real models for the gradient chain, each named after the bug it carries."""

from __future__ import annotations

import torch
import torch.nn as nn


class DetachedEncoder(nn.Module):
    """The encoder's output is detached before the head: enc gets no gradient."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = torch.relu(self.enc(x)).detach()  # CUT: detach
        return self.head(h)


class NoGradEncoder(nn.Module):
    """The encoder runs under torch.no_grad() inside forward."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        with torch.no_grad():
            h = self.enc(x)  # CUT: no_grad
        return self.head(h)


class TolistRebuild(nn.Module):
    """Features leave the graph through .tolist() and come back through torch.tensor(...)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = torch.tensor(self.enc(x).tolist())  # CUT: tolist
        return self.head(h)


class PlainTensorAttribute(nn.Module):
    """A weight stored as a plain tensor with requires_grad=True: not a registered parameter."""

    def __init__(self):
        super().__init__()
        self.w = torch.randn(4, 1, requires_grad=True)
        self.b = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return x @ self.w + self.b


class PythonListOfLayers(nn.Module):
    """Layers kept in a Python list instead of nn.ModuleList."""

    def __init__(self):
        super().__init__()
        self.blocks = [nn.Linear(4, 4), nn.Linear(4, 4)]
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        for b in self.blocks:
            x = torch.relu(b(x))
        return self.head(x)


class UnusedAuxHead(nn.Module):
    """An auxiliary head that forward never calls."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)
        self.aux = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(torch.relu(self.enc(x)))


class RecreatedParameter(nn.Module):
    """A Parameter re-created inside forward: the optimizer holds the old one."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.lin = nn.Linear(4, 1)

    def forward(self, x):
        self.scale = nn.Parameter(torch.ones(1))  # BUG: new Parameter each call
        return self.lin(x) * self.scale


class LeafInForward(nn.Module):
    """A weight created with requires_grad=True inside forward (a leaf, not a parameter)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        w = torch.ones(4, 1, requires_grad=True)  # BUG: leaf re-created each call
        return self.lin(x) @ w


class DeadReLU(nn.Module):
    """The first layer's pre-activations are all negative: ReLU passes no gradient."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 1)
        with torch.no_grad():
            self.fc1.weight.zero_()
            self.fc1.bias.fill_(-10.0)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class MultipliedByZero(nn.Module):
    """A gate that is always 0 multiplies the branch: its gradient is exactly zero."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(4, 1)
        self.branch = nn.Linear(4, 1)
        self.register_buffer("gate", torch.zeros(1))

    def forward(self, x):
        return self.trunk(x) + self.gate * self.branch(x)


class CleanFrozenBackbone(nn.Module):
    """A frozen backbone and a trainable head: correct, infos only."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 1)
        self.backbone.requires_grad_(False)

    def forward(self, x):
        return self.head(torch.relu(self.backbone(x)))


def mlp(seed: int = 1) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


class InferenceModeEncoder(nn.Module):
    """The encoder runs under torch.inference_mode() inside forward."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        with torch.inference_mode():
            h = self.enc(x)  # CUT: inference_mode
        return self.head(h.clone())


class FloatRebuild(nn.Module):
    """A scale leaves the graph through float() and comes back through torch.tensor(...)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 1)
        self.gate = nn.Linear(4, 1)

    def forward(self, x):
        k = torch.tensor(float(self.gate(x).mean()))  # CUT: float
        return self.lin(x) * k


class TensorOfTensors(nn.Module):
    """torch.tensor([a, b]) of tensors that require grad copies their values: a and b lose their path."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 1)
        self.b = nn.Linear(4, 1)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        extra = torch.tensor([self.a(x).mean(), self.b(x).mean()])  # CUT: torch.tensor
        return self.head(x) + extra.sum()


class DataAttribute(nn.Module):
    """The encoder's output is read through `.data`: a detach by another name."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = self.enc(x)
        return self.head(h.data)  # CUT: data


class DetachEveryBlock(nn.Module):
    """Each block's output is detached in a loop: only the last block trains."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        for b in self.blocks:
            x = torch.tanh(b(x)).detach() if b is not self.blocks[-1] else b(x)  # CUT: loop
        return x.sum(1, keepdim=True)


class PythonDictOfLayersAndTensors(nn.Module):
    """Heads in a Python dict and a weight in a Python list: neither is registered."""

    def __init__(self):
        super().__init__()
        self.heads = {"a": nn.Linear(4, 1), "b": nn.Linear(4, 1)}
        self.extra = [torch.randn(4, 1, requires_grad=True)]
        self.trunk = nn.Linear(4, 1)

    def forward(self, x):
        return self.trunk(x) + self.heads["a"](x) + self.heads["b"](x) + x @ self.extra[0]
