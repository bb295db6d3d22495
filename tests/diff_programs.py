"""Pairs of training steps for `torchtriage.diff` (issue 28): a reference (`*_a`) and a copy
(`*_b`) changed by one silent bug, each marked `# changed` on the line the bug is on."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def _sgd(*modules: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD([p for m in modules for p in m.parameters()], lr=0.1)


class Attention(nn.Module):
    def __init__(self, d: int = 8, dim: int = -1) -> None:
        super().__init__()
        self.qk = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, 4)
        self.dim = dim

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, invert: bool = False) -> torch.Tensor:
        q, k = self.qk(x).chunk(2, dim=-1)
        scores = q @ k.transpose(1, 2) / 8 ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~mask if invert else mask, float("-inf"))  # changed (mask)
        attn = scores.softmax(dim=self.dim)  # changed (softmax)
        return self.out(attn @ x).mean(1)


def softmax_step(dim: int):
    model = Attention(dim=dim)
    opt = _sgd(model)

    def step(batch):
        x, y = batch
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def mask_step(invert: bool):
    model = Attention()
    opt = _sgd(model)

    def step(batch):
        x, y = batch
        mask = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
        loss = F.cross_entropy(model(x, mask, invert), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def detach_step(detach: bool):
    student, teacher = nn.Linear(8, 4), nn.Linear(8, 4)
    opt = _sgd(student, teacher)

    def step(batch):
        x, _ = batch
        x = x.mean(1)
        target = teacher(x).detach() if detach else teacher(x)  # changed (detach)
        loss = F.mse_loss(student(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def reduction_step(reduction: str):
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = _sgd(model)

    def step(batch):
        x, y = batch
        err = (model(x.mean(1)).squeeze(1) - y.float()) ** 2
        loss = err.mean() if reduction == "mean" else err.sum()  # changed (reduction)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


class Block(nn.Module):
    def __init__(self, swapped: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 4)
        self.swapped = swapped

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(self.norm(x)) if self.swapped else self.norm(self.fc(x))  # changed (order)
        return self.head(torch.relu(h))


def order_step(swapped: bool):
    model = Block(swapped)
    opt = _sgd(model)

    def step(batch):
        x, y = batch
        loss = F.cross_entropy(model(x.mean(1)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


class Finetune(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.ReLU())
        self.head = nn.Linear(16, 4)


def dropout_step(freeze_in_eval: bool):
    model = Finetune()
    model.backbone.requires_grad_(False)
    opt = _sgd(model.head)

    def step(batch):
        x, y = batch
        model.train()
        if freeze_in_eval:
            model.backbone.eval()  # changed (dropout): the frozen backbone runs without dropout
        loss = F.cross_entropy(model.head(model.backbone(x.mean(1))), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.out = nn.Linear(8, 11)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.emb(tokens)))


def shift_step(shifted: bool):
    model = TinyLM()
    opt = _sgd(model)

    def step(tokens):
        logits = model(tokens)[:, :-1]
        targets = tokens[:, 1:] if shifted else tokens[:, :-1]  # changed (shift)
        loss = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


# ----------------------------------------------------------------- layout only: no divergence
class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


class RenamedMLP(nn.Module):
    """The same network, refactored: other names, a helper, torch.relu, a no-op reshape."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleDict({"inp": nn.Linear(8, 16), "proj": nn.Linear(16, 4)})

    def _hidden(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.layers["inp"](x.reshape(x.shape[0], -1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self._hidden(x)
        return self.layers["proj"](hidden)


def layout_step(refactored: bool):
    model = RenamedMLP() if refactored else MLP()
    opt = _sgd(model)

    def step(batch):
        x, y = batch
        if refactored:
            features = x.mean(dim=1)
            logits = model(features)
            loss = F.cross_entropy(input=logits, target=y)
            opt.zero_grad()
        else:
            opt.zero_grad()
            loss = F.cross_entropy(model(x.mean(1)), y)
        loss.backward()
        opt.step()
    return step


# ----------------------------------------------------------------- not one program
def conv_step():
    model = nn.Sequential(nn.Conv1d(6, 12, 3, padding=1), nn.GELU(), nn.Conv1d(12, 12, 3), nn.Flatten(),
                          nn.Linear(72, 4))
    opt = torch.optim.Adam(model.parameters())

    def step(batch):
        x, y = batch
        loss = F.nll_loss(F.log_softmax(model(x), -1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 6, 8, generator=g), torch.randint(0, 4, (4,), generator=g)


def tokens() -> torch.Tensor:
    return torch.randint(0, 11, (4, 7), generator=torch.Generator().manual_seed(0))


def metric_step(cast: bool):
    """A metric after the update: `.mean()` of a long tensor raises (fixed by a cast)."""
    model = nn.Linear(8, 4)
    opt = _sgd(model)

    def step(batch):
        x, y = batch
        logits = model(x.mean(1))
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        hits = (logits.argmax(1) == y).long()
        return hits.float().mean() if cast else hits.mean()  # changed (metric)
    return step
