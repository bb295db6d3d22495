"""Contrastive losses whose positive pairs are each an embedding with itself (and correct
look-alikes). Each builder returns (model, optimizer, train); `bug=False` is the fixed twin."""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------- text: NT-Xent, function trainer
class SentenceEncoder(nn.Module):
    def __init__(self, vocab: int = 60, d: int = 24) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab, d, mode="mean")
        self.proj = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 16))

    def forward(self, ids):
        return self.proj(self.bag(ids))


def drop_words(ids, g):
    keep = torch.rand(ids.shape, generator=g) > 0.2
    return torch.where(keep, ids, torch.zeros_like(ids))


def nt_xent(z1, z2, tau=0.2):
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = z1.shape[0]
    sim = z @ z.t() / tau
    sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool), -1e9)
    labels = (torch.arange(2 * n) + n) % (2 * n)
    return F.cross_entropy(sim, labels)


def ssl_step(model, opt, ids, g, bug):
    v1, v2 = drop_words(ids, g), drop_words(ids, g)
    z1 = model(v1)
    z2 = model(v1 if bug else v2)  # BUG: the first view encoded twice
    loss = nt_xent(z1, z2)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def loop_text_ntxent(bug: bool):
    torch.manual_seed(11)
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(1, 60, (96, 9))
    model = SentenceEncoder()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return model, opt, lambda: [ssl_step(model, opt, ids[s:s + 16], g, bug) for s in range(0, 96, 16)]


# ---------------------------------------------------------------------------- vision: MoCo, class trainer
class ConvEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                                 nn.Linear(32, 12))

    def forward(self, x):
        return self.net(x)


class MoCoTrainer:
    def __init__(self, bug: bool, queue: int = 40, m: float = 0.99, t: float = 0.1) -> None:
        self.bug, self.m, self.t = bug, m, t
        self.enc_q = ConvEncoder()
        self.enc_k = copy.deepcopy(self.enc_q)
        for p in self.enc_k.parameters():
            p.requires_grad_(False)
        self.queue = F.normalize(torch.randn(queue, 12), dim=1)
        self.opt = torch.optim.SGD(self.enc_q.parameters(), lr=0.05, momentum=0.9)

    def augment(self, x):
        return (x.flip(-1) if torch.rand(()) < 0.5 else x) + 0.1 * torch.randn_like(x)

    def step(self, x):
        x1, x2 = self.augment(x), self.augment(x)
        q = F.normalize(self.enc_q(x1), dim=1)
        with torch.no_grad():
            k = F.normalize(self.enc_k(x1 if self.bug else x2), dim=1)  # BUG: the key encodes the query's view
        l_pos = (q * k).sum(dim=1, keepdim=True)
        l_neg = q @ self.queue.t()
        logits = torch.cat([l_pos, l_neg], dim=1) / self.t
        loss = F.cross_entropy(logits, torch.zeros(len(x), dtype=torch.long))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        with torch.no_grad():
            for pk, pq in zip(self.enc_k.parameters(), self.enc_q.parameters()):
                pk.mul_(self.m).add_(pq, alpha=1 - self.m)
            self.queue = torch.cat([k, self.queue])[:len(self.queue)]
        return loss.item()


def loop_vision_moco(bug: bool):
    torch.manual_seed(12)
    images = torch.randn(48, 1, 8, 8)
    trainer = MoCoTrainer(bug)
    return trainer.enc_q, trainer.opt, lambda: [trainer.step(images[s:s + 8]) for s in range(0, 48, 8)]


# ---------------------------------------------------------------------------- tabular: SCARF-style InfoNCE, plain loop
def loop_tabular_infonce(bug: bool):
    torch.manual_seed(13)
    x = torch.randn(80, 10)
    enc = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 8))
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-3)

    def corrupt(rows):
        mask = torch.rand(rows.shape) < 0.3
        return torch.where(mask, x[torch.randint(0, 80, (len(rows),))], rows)

    def train():
        out = []
        for s in range(0, 80, 20):
            rows = x[s:s + 20]
            anchor = F.normalize(enc(rows), dim=-1)
            positive = F.normalize(enc(rows if bug else corrupt(rows)), dim=-1)  # BUG: the anchor's rows again
            logits = torch.matmul(anchor, positive.T) / 0.5
            loss = F.cross_entropy(logits, torch.arange(len(rows)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out
    return enc, opt, train


# ---------------------------------------------------------------------------- correct look-alikes
class TwoTower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.img = nn.Linear(12, 8)
        self.txt = nn.EmbeddingBag(30, 8)
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, img, ids):
        return F.normalize(self.img(img), dim=-1), F.normalize(self.txt(ids), dim=-1), self.scale.exp()


def loop_clip():
    torch.manual_seed(14)
    img, ids = torch.randn(48, 12), torch.randint(0, 30, (48, 4))
    model = TwoTower()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train():
        out = []
        for s in range(0, 48, 12):
            a, b, scale = model(img[s:s + 12], ids[s:s + 12])
            logits = scale * a @ b.t()
            labels = torch.arange(12)
            loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out
    return model, opt, train


def loop_classifier_without_bias():
    torch.manual_seed(15)
    x, y = torch.randn(40, 6), torch.randint(0, 6, (40,))
    model = nn.Sequential(nn.Linear(6, 6, bias=False), nn.ReLU(), nn.Linear(6, 6, bias=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train():
        out = []
        for s in range(0, 40, 10):
            h = model[1](model[0](x[s:s + 10]))
            logits = h @ model[2].weight.t()  # a head written as a product: rows against class vectors
            loss = F.cross_entropy(logits, y[s:s + 10])
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out
    return model, opt, train


def loop_few_rows_unchanged():
    """An augmentation that leaves some rows unchanged: a few positive pairs are identical, not all."""
    torch.manual_seed(16)
    x = torch.randn(64, 10)
    enc = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 8))
    opt = torch.optim.Adam(enc.parameters(), lr=1e-3)

    def train():
        out = []
        for s in range(0, 64, 16):
            rows = x[s:s + 16]
            moved = (torch.arange(16) % 4 != 0).float().unsqueeze(1)  # every 4th row left as it was
            other = rows + moved * 0.3 * torch.randn_like(rows)
            logits = F.normalize(enc(rows), dim=-1) @ F.normalize(enc(other), dim=-1).t() / 0.3
            loss = F.cross_entropy(logits, torch.arange(16))
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out
    return enc, opt, train


def loop_byol():
    """BYOL: the target is a copy of the online network at step 0, on the other view; a cosine loss."""
    torch.manual_seed(17)
    x = torch.randn(48, 10)
    online = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 8))
    predictor = nn.Linear(8, 8)
    target = copy.deepcopy(online)
    opt = torch.optim.Adam([*online.parameters(), *predictor.parameters()], lr=1e-3)

    def train():
        out = []
        for s in range(0, 48, 12):
            rows = x[s:s + 12]
            v1, v2 = rows + 0.1 * torch.randn_like(rows), rows + 0.1 * torch.randn_like(rows)
            p = F.normalize(predictor(online(v1)), dim=-1)
            with torch.no_grad():
                z = F.normalize(target(v2), dim=-1)
            loss = 2 - 2 * (p * z).sum(dim=-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                for pt, po in zip(target.parameters(), online.parameters()):
                    pt.mul_(0.99).add_(po, alpha=0.01)
            out.append(loss.item())
        return out
    return online, opt, train
