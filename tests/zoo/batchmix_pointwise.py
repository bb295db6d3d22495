"""Samples that mix across the batch, in programs whose loss is pointwise (`mse_loss`, `l1_loss`,
`binary_cross_entropy_with_logits`) and whose batches are sliced by hand (no DataLoader): the
batch size is the loss's leading axis. And correct look-alikes trained the same way.

Each builder returns (model, optimizer, train); `bug=False` is the fixed twin."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------- tabular: feature tokens, plain loop, mse
class FeatureTokenRegressor(nn.Module):
    """Each numeric column embedded as a token (batch, columns, d), an encoder over the tokens."""

    def __init__(self, bug: bool, cols: int = 6, d: int = 16) -> None:
        super().__init__()
        self.tokens = nn.Parameter(torch.randn(cols, d) * 0.3)
        self.bias = nn.Parameter(torch.zeros(cols, d))
        layer = nn.TransformerEncoderLayer(d, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=not bug)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        tok = x.unsqueeze(-1) * self.tokens + self.bias
        h = self.encoder(tok)  # BUG: tokens (batch, cols, d) to an encoder without batch_first
        return self.head(h.mean(dim=1))


def loop_tabular_tokens(bug: bool):
    torch.manual_seed(4)
    x = torch.randn(120, 6)
    y = (x[:, 0] * x[:, 1] - x[:, 2]).unsqueeze(1)
    model = FeatureTokenRegressor(bug)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def train():
        losses = []
        for step in range(5):
            idx = torch.randperm(120)[:24]
            loss = F.mse_loss(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    return model, opt, train


# ---------------------------------------------------------------------------- text: LSTM, function trainer, BCE with logits
class ReviewScorer(nn.Module):
    def __init__(self, bug: bool, vocab: int = 40, d: int = 12) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.rnn = nn.LSTM(d, d, batch_first=not bug)
        self.out = nn.Linear(d, 1)

    def forward(self, ids):
        states, _ = self.rnn(self.embed(ids))  # BUG: (batch, words, d) to a time-major LSTM
        return self.out(states[:, -1]).squeeze(-1)


def train_step(model, opt, ids, label):
    logits = model(ids)
    loss = F.binary_cross_entropy_with_logits(logits, label)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def loop_review_lstm(bug: bool):
    torch.manual_seed(5)
    ids = torch.randint(0, 40, (64, 11))
    label = (ids[:, :3].sum(dim=1) % 2).float()
    model = ReviewScorer(bug)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train():
        return [train_step(model, opt, ids[s:s + 16], label[s:s + 16]) for s in range(0, 64, 16)]
    return model, opt, train


# ---------------------------------------------------------------------------- vision: attention over patches, class trainer, l1
class PatchKeypoints(nn.Module):
    """Patches (batch, patches, d) through a hand-built nn.MultiheadAttention; the keypoint (x, y)."""

    def __init__(self, bug: bool, d: int = 16) -> None:
        super().__init__()
        self.patch = nn.Conv2d(1, d, 4, stride=4)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=not bug)
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, 2)

    def forward(self, img):
        p = self.patch(img).flatten(2).transpose(1, 2)
        a, _ = self.attn(p, p, p)  # BUG: (batch, patches, d) to an attention without batch_first
        return self.out(self.norm(p + a).mean(dim=1))


class KeypointTrainer:
    def __init__(self, model):
        self.model = model
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(self, img, xy):
        loss = F.smooth_l1_loss(self.model(img), xy)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()


def loop_patch_keypoints(bug: bool):
    torch.manual_seed(6)
    img = torch.randn(40, 1, 16, 16)
    xy = torch.rand(40, 2)
    model = PatchKeypoints(bug)
    trainer = KeypointTrainer(model)

    def train():
        return [trainer.step(img[s:s + 8], xy[s:s + 8]) for s in range(0, 40, 8)]
    return model, trainer.opt, train


# ---------------------------------------------------------------------------- correct look-alikes
class TimeMajorForecaster(nn.Module):
    """A time-major GRU fed (T, B, 1) and a loss on (T, B, 1): the loss's leading axis is time."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(1, 8)
        self.out = nn.Linear(8, 1)

    def forward(self, seq):
        h, _ = self.gru(seq)
        return self.out(h)


def loop_time_major_mse():
    torch.manual_seed(7)
    series = torch.sin(torch.linspace(0, 30, 13 * 40)).reshape(13, 40, 1)
    model = TimeMajorForecaster()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def train():
        out = []
        for s in range(0, 40, 10):
            seq = series[:, s:s + 10]
            loss = F.mse_loss(model(seq[:-1]), seq[1:])
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out
    return model, opt, train


class DeepSet(nn.Module):
    """Sets (batch, members, f): members mix inside a set by design, never across sets."""

    def __init__(self) -> None:
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(3, 16), nn.ReLU())
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.rho = nn.Linear(16, 1)

    def forward(self, s):
        h = self.phi(s)
        h, _ = self.attn(h, h, h)
        return self.rho(h.mean(dim=1))


def loop_deep_set():
    torch.manual_seed(8)
    sets = torch.randn(48, 7, 3)
    y = sets.norm(dim=2).max(dim=1).values.unsqueeze(1)
    model = DeepSet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train():
        out = []
        for s in range(0, 48, 12):
            loss = F.l1_loss(model(sets[s:s + 12]), y[s:s + 12])
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out
    return model, opt, train


class BNAutoencoder(nn.Module):
    """BatchNorm in train mode while training (batch statistics): running statistics in eval."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(10, 6), nn.BatchNorm1d(6), nn.ReLU())
        self.dec = nn.Linear(6, 10)

    def forward(self, x):
        return self.dec(self.enc(x))


def loop_bn_autoencoder():
    torch.manual_seed(9)
    x = torch.randn(64, 10)
    model = BNAutoencoder()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def train():
        out = []
        for s in range(0, 64, 16):
            loss = F.mse_loss(model(x[s:s + 16]), x[s:s + 16])
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out
    return model, opt, train


class NodeRegressor(nn.Module):
    """One graph per batch: nodes (N, f) linked by edge_index (2, E)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 8)
        self.out = nn.Linear(8, 1)

    def forward(self, x, edge_index):
        h = torch.relu(self.lin(x))
        agg = torch.zeros_like(h).index_add_(0, edge_index[1], h[edge_index[0]])
        return self.out(h + agg)


def loop_graph_nodes():
    torch.manual_seed(10)
    x = torch.randn(30, 4)
    edge_index = torch.randint(0, 30, (2, 90))
    y = torch.randn(30, 1)
    model = NodeRegressor()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def train():
        out = []
        for _ in range(4):
            loss = F.mse_loss(model(x, edge_index), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out
    return model, opt, train


class DenseGCN(nn.Module):
    """One graph: node features (N, f), its normalised adjacency (N, N) kept as a buffer."""

    def __init__(self, adj) -> None:
        super().__init__()
        self.register_buffer("adj", adj)
        self.lin1 = nn.Linear(4, 8)
        self.lin2 = nn.Linear(8, 1)

    def forward(self, x):
        return self.lin2(self.adj @ torch.relu(self.lin1(self.adj @ x)))


def loop_dense_gcn():
    torch.manual_seed(18)
    a = (torch.rand(25, 25) < 0.15).float()
    a = ((a + a.t() + torch.eye(25)) > 0).float()
    adj = a / a.sum(dim=1, keepdim=True)
    x, y = torch.randn(25, 4), torch.randn(25, 1)
    model = DenseGCN(adj)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def train():
        out = []
        for _ in range(4):
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out
    return model, opt, train
