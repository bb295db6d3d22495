"""Training steps written the way users write them, beyond "one model call + one F loss"
(issue 11): raw tensors as parameters, hand-written losses, several model calls per step,
functional code. Each `BUG` comment marks the line a finding must name."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def gmm_item_rebuild(steps: int = 3) -> tuple[torch.optim.Optimizer, torch.Tensor]:
    """A 1-D two-component mixture fitted by hand: the means are rebuilt from `.item()`."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 1, generator=g)
    means_coef = torch.rand(2, generator=g, requires_grad=True)
    log_scales = torch.zeros(2, requires_grad=True)
    opt = torch.optim.Adam([means_coef, log_scales], lr=0.05)
    loss = torch.zeros(())
    for _ in range(steps):
        opt.zero_grad()
        means = torch.tensor([means_coef[0].item(), means_coef[1].item()])  # BUG: values leave the graph
        d = (x - means) / log_scales.exp()
        loss = (d ** 2).mean() + log_scales.sum()
        loss.backward()
        opt.step()
    return opt, loss.detach()


def gmm_correct(steps: int = 3) -> torch.optim.Optimizer:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 1, generator=g)
    means_coef = torch.rand(2, generator=g, requires_grad=True)
    log_scales = torch.zeros(2, requires_grad=True)
    opt = torch.optim.Adam([means_coef, log_scales], lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        d = (x - means_coef) / log_scales.exp()
        loss = (d ** 2).mean() + log_scales.sum()
        loss.backward()
        opt.step()
    return opt


def style_transfer(steps: int = 3) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor]:
    """Optimize an image through a frozen feature net: `Adam([image])` (correct)."""
    torch.manual_seed(0)
    features = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3))
    for p in features.parameters():
        p.requires_grad_(False)
    target = torch.rand(1, 3, 16, 16)
    image = torch.rand(1, 3, 16, 16, requires_grad=True)
    opt = torch.optim.Adam([image], lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(features(image), features(target)) + 1e-3 * image.pow(2).mean()
        loss.backward()
        opt.step()
    return features, opt, image


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def siamese_contrastive(net: nn.Module, opt: torch.optim.Optimizer, steps: int = 2) -> None:
    """A contrastive loss written by hand, the model called twice per step; half the pairs
    are the same sample, so their distance is exactly 0."""
    g = torch.Generator().manual_seed(0)
    x1 = torch.randn(8, 4, generator=g)
    x2 = x1.clone()
    x2[4:] = torch.randn(4, 4, generator=g)
    same = torch.zeros(8)
    same[:4] = 1
    margin = 1.0
    for _ in range(steps):
        opt.zero_grad()
        e1 = net(x1)
        e2 = net(x2)
        dist = torch.sqrt(((e1 - e2) ** 2).sum(1))  # BUG: sqrt at distance 0
        loss = (same * dist ** 2 + (1 - same) * torch.relu(margin - dist) ** 2).mean()
        loss.backward()
        opt.step()


def sqrt_where_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    z = pred - target
    return torch.where(z > 0, torch.sqrt(z), z).abs().mean()  # BUG: sqrt of the branch not taken


def where_behind_loss(net: nn.Module, opt: torch.optim.Optimizer, steps: int = 2) -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)
    for _ in range(steps):
        opt.zero_grad()
        loss = sqrt_where_loss(net(x), y)
        loss.backward()
        opt.step()


def metric_before_backward(net: nn.Module, opt: torch.optim.Optimizer, steps: int = 2) -> None:
    """An entropy metric computed before backward and folded into the loss with weight 0."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    for _ in range(steps):
        opt.zero_grad()
        logits = net(x)
        loss = F.cross_entropy(logits, y)
        probs = logits.softmax(-1)
        entropy = -(probs * torch.log(probs - probs.detach())).sum(1).mean()  # BUG: log(0)
        (loss + 0.0 * entropy).backward()
        opt.step()


def functional_model(steps: int = 2) -> tuple[torch.optim.Optimizer, dict[str, torch.Tensor]]:
    """No module is watched: the parameters are a dict of tensors (torch.func.functional_call)."""
    from torch.func import functional_call

    torch.manual_seed(0)
    net = nn.Linear(4, 1)
    params = {k: v.detach().clone().requires_grad_(True) for k, v in net.named_parameters()}
    opt = torch.optim.SGD(params.values(), lr=0.1)
    x = torch.randn(8, 4)
    x[3] = 0
    for _ in range(steps):
        opt.zero_grad()
        out = functional_call(net, params, (x,))
        scale = x.norm(dim=1, keepdim=True)
        loss = (out / scale).pow(2).mean()  # BUG: a zero row of the batch divides by 0
        loss.backward()
        opt.step()
    return opt, params


class LogFeatures(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)  # BUG: log of negative features


def gan(G: nn.Module, netD: nn.Module, optG: torch.optim.Optimizer, optD: torch.optim.Optimizer,
        steps: int = 2) -> None:
    """A GAN step: D on real and on detached fake, then G through D; hand-written BCE."""
    g = torch.Generator().manual_seed(0)
    real = torch.rand(8, 4, generator=g) + 5
    for _ in range(steps):
        fake = G(torch.randn(8, 2, generator=g))
        optD.zero_grad()
        d_loss = -(torch.log(torch.sigmoid(netD(real))) + torch.log(1 - torch.sigmoid(netD(fake.detach())))).mean()
        d_loss.backward()
        optD.step()
        optG.zero_grad()
        g_loss = -torch.log(torch.sigmoid(netD(fake))).mean()
        g_loss.backward()
        optG.step()


def normalize_before_model(net: nn.Module, opt: torch.optim.Optimizer, steps: int = 2) -> None:
    """Each sample divided by its sum before the model; sample 2 is all zeros."""
    g = torch.Generator().manual_seed(0)
    raw = torch.rand(8, 4, generator=g)
    raw[2] = 0
    y = torch.randn(8, 1, generator=g)
    for _ in range(steps):
        opt.zero_grad()
        x = raw / raw.sum(1, keepdim=True)  # BUG: a zero sample divides 0 by 0
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
