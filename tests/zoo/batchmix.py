"""Models whose samples mix across the batch in the forward pass (and correct look-alikes).

Each builder returns (model, optimizer, train); `bug=False` is the fixed twin."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


# ---------------------------------------------------------------------------- GRU encoder + GRU head
class ActivityNet(nn.Module):
    """Sensor windows (batch, time, channels): a GRU encoder, then a second GRU whose batch_first
    was forgotten."""

    def __init__(self, bug: bool, channels: int = 6, hidden: int = 16, classes: int = 4) -> None:
        super().__init__()
        self.encoder = nn.GRU(channels, hidden, batch_first=True)
        self.refine = nn.GRU(hidden, hidden, batch_first=not bug)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        h, _ = self.encoder(x)
        h, _ = self.refine(h)  # BUG: refine reads (batch, time, hidden) as time-major
        return self.head(h.mean(dim=1))


def loop_gru_activity(bug: bool):
    torch.manual_seed(0)
    x = torch.randn(96, 20, 6)
    y = (x[:, :, 0].mean(dim=1) > 0).long() + 2 * (x[:, :, 1].mean(dim=1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=12, shuffle=True)
    model = ActivityNet(bug)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def train():
        for _ in range(2):
            for xb, yb in loader:
                loss = F.cross_entropy(model(xb), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()
    return model, opt, train


# ---------------------------------------------------------------------------- LSTM forecaster, function trainer
class Forecaster(nn.Module):
    def __init__(self, batch_first: bool, hidden: int = 12) -> None:
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, num_layers=2, batch_first=batch_first)
        self.out = nn.Linear(hidden, 1)

    def forward(self, window):
        seq, _ = self.lstm(window)  # BUG: (batch, time, 1) given to a time-major LSTM
        return self.out(seq[:, -1, :])


def fit(model, loader, opt, epochs):
    for _ in range(epochs):
        for window, target in loader:
            pred = model(window)
            loss = F.mse_loss(pred, target)
            opt.zero_grad()
            loss.backward()
            opt.step()


def loop_lstm_forecast(bug: bool):
    torch.manual_seed(1)
    t = torch.linspace(0, 40, 1200)
    series = torch.sin(t) + 0.1 * torch.randn_like(t)
    windows = series.unfold(0, 25, 5)[:, :, None]  # (N, 25, 1)
    x, y = windows[:, :-1], windows[:, -1]
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = Forecaster(batch_first=not bug)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    return model, opt, lambda: fit(model, loader, opt, 2)


# ---------------------------------------------------------------------------- transformer encoder, class trainer
class TokenClassifier(nn.Module):
    def __init__(self, bug: bool, vocab: int = 50, d: int = 32, classes: int = 3) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=64, dropout=0.1, batch_first=not bug)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.cls = nn.Linear(d, classes)

    def forward(self, ids):
        h = self.encoder(self.embed(ids))  # BUG: (batch, seq, d) into a sequence-first encoder
        return self.cls(h.mean(dim=1))


class Trainer:
    def __init__(self, model, lr=1e-3):
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr)

    def training_step(self, batch):
        ids, labels = batch
        return F.cross_entropy(self.model(ids), labels)

    def fit(self, ids, labels, batch_size=10, epochs=2):
        self.model.train()
        for _ in range(epochs):
            for s in range(0, len(ids), batch_size):
                loss = self.training_step((ids[s:s + batch_size], labels[s:s + batch_size]))
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()


def loop_transformer_classifier(bug: bool):
    torch.manual_seed(2)
    ids = torch.randint(0, 50, (60, 14))
    labels = ids[:, 0] % 3
    model = TokenClassifier(bug)
    trainer = Trainer(model)
    return model, trainer.optimizer, lambda: trainer.fit(ids, labels)


# ---------------------------------------------------------------------------- a view where a permute was meant
class Tagger(nn.Module):
    def __init__(self, bug: bool, feats: int = 8, hidden: int = 16, classes: int = 5) -> None:
        super().__init__()
        self.bug = bug
        self.rnn = nn.LSTM(feats, hidden)  # time-major, as the docs' default
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        b, t, f = x.shape
        if self.bug:
            x = x.view(t, b, f)  # BUG: view where permute(1, 0, 2) was meant
        else:
            x = x.permute(1, 0, 2)
        out, _ = self.rnn(x)
        return self.head(out[-1])


def loop_view_for_permute(bug: bool):
    torch.manual_seed(3)
    x = torch.randn(80, 9, 8)
    y = (x.sum(dim=(1, 2)) * 3).long().clamp(-2, 2) + 2
    model = Tagger(bug)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def train():
        for step in range(6):
            idx = torch.randperm(80)[:16]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


# ---------------------------------------------------------------------------- correct look-alikes
class TimeMajorTagger(nn.Module):
    """Per-step tags of a time-major batch (T, B, F): the loss reads (B, C, T)."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(4, 8, bidirectional=True)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        h, _ = self.rnn(x)
        return self.out(h)


def loop_time_major_tagger():
    torch.manual_seed(4)
    x = torch.randn(11, 64, 4)  # (time, samples, features)
    y = (x[..., 0] > 0).long() + (x[..., 1] > 1).long()
    model = TimeMajorTagger()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def train():
        for s in range(0, 64, 8):
            logits = model(x[:, s:s + 8])  # (T, B, C)
            loss = F.cross_entropy(logits.permute(1, 2, 0), y[:, s:s + 8].t())
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


class SeqFirstEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(30, 16)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0), 1,
                                         enable_nested_tensor=False)
        self.cls = nn.Linear(16, 2)

    def forward(self, ids):  # ids (T, B)
        return self.cls(self.enc(self.embed(ids))[0])


def loop_seq_first_transformer():
    torch.manual_seed(5)
    ids = torch.randint(0, 30, (12, 40))
    labels = (ids[0] > 15).long()
    model = SeqFirstEncoder()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train():
        for s in range(0, 40, 8):
            loss = F.cross_entropy(model(ids[:, s:s + 8]), labels[s:s + 8])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


def loop_batchnorm_cnn(track: bool):
    torch.manual_seed(6)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8, track_running_stats=track), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    x, y = torch.randn(48, 3, 10, 10), torch.randint(0, 4, (48,))
    loader = DataLoader(TensorDataset(x, y), batch_size=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def train():
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


class TwoTower(nn.Module):
    """CLIP-style: the logits of a batch are its B x B similarities."""

    def __init__(self) -> None:
        super().__init__()
        self.img = nn.Linear(20, 16)
        self.txt = nn.Embedding(40, 16)
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, images, tokens):
        a = F.normalize(self.img(images), dim=-1)
        b = F.normalize(self.txt(tokens).mean(dim=1), dim=-1)
        return self.scale.exp() * a @ b.t()


def loop_two_tower():
    torch.manual_seed(7)
    images, tokens = torch.randn(64, 20), torch.randint(0, 40, (64, 6))
    loader = DataLoader(TensorDataset(images, tokens), batch_size=16, shuffle=True)
    model = TwoTower()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train():
        for im, tk in loader:
            logits = model(im, tk)
            target = torch.arange(len(im))
            loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target)) / 2
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


class GraphConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(5, 16), nn.Linear(16, 3)

    def propagate(self, h, edge_index):
        out = torch.zeros_like(h).index_add_(0, edge_index[1], h[edge_index[0]])
        return out + h

    def forward(self, x, edge_index):
        h = F.relu(self.lin1(self.propagate(x, edge_index)))
        return self.lin2(self.propagate(h, edge_index))


def loop_full_batch_gnn():
    torch.manual_seed(8)
    x = torch.randn(30, 5)
    edge_index = torch.randint(0, 30, (2, 90))
    y = torch.randint(0, 3, (30,))
    model = GraphConv()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def train():
        for _ in range(4):
            loss = F.cross_entropy(model(x, edge_index), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


class StatefulSampler(nn.Module):
    """Keeps its last hidden state as an attribute, samples noise in forward even in eval, and
    counts its calls in a buffer: the probe must leave all three as they were."""

    def __init__(self, bug: bool) -> None:
        super().__init__()
        self.rnn = nn.GRU(3, 6, batch_first=not bug)
        self.head = nn.Linear(6, 2)
        self.register_buffer("calls", torch.zeros(()))
        self.last_h = None

    def forward(self, x):
        self.calls += 1
        h, self.last_h = self.rnn(x + 0.01 * torch.randn_like(x))
        return self.head(h[:, -1])


def loop_stateful(bug: bool):
    torch.manual_seed(9)
    x, y = torch.randn(40, 7, 3), torch.randint(0, 2, (40,))
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    model = StatefulSampler(bug)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []

    def train():
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    return model, opt, train


class ProtoNet(nn.Module):
    """A few-shot episode: class prototypes are the means of the support embeddings, each query
    scored against them (the support samples are every query's context, by design)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 16))

    def forward(self, support, query, ways: int = 5):
        protos = self.embed(support).view(ways, -1, 16).mean(dim=1)
        return -torch.cdist(self.embed(query), protos)


def loop_protonet():
    torch.manual_seed(10)
    centers = torch.randn(5, 12) * 2
    model = ProtoNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train():
        for _ in range(4):
            # 5 ways x 5 shots, 5 queries per way: 25 support and 25 query samples
            support = (centers[:, None] + torch.randn(5, 5, 12)).reshape(25, 12)
            query = (centers[:, None] + torch.randn(5, 5, 12)).reshape(25, 12)
            labels = torch.arange(5).repeat_interleave(5)
            loss = F.cross_entropy(model(support, query), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


class MomentumQueue(nn.Module):
    """MoCo-style: the key encoder is updated through `.data` inside forward and the keys are
    enqueued into a buffer; the probe's calls must neither see each other's updates nor keep them."""

    def __init__(self, k: int = 24) -> None:
        super().__init__()
        self.q_enc, self.k_enc = nn.Linear(10, 8), nn.Linear(10, 8)
        self.k_enc.load_state_dict(self.q_enc.state_dict())
        self.register_buffer("queue", F.normalize(torch.randn(8, k), dim=0))
        self.register_buffer("ptr", torch.zeros(1, dtype=torch.long))

    def forward(self, a, b):
        for pq, pk in zip(self.q_enc.parameters(), self.k_enc.parameters()):
            pk.data = pk.data * 0.9 + pq.data * 0.1
        q, k = F.normalize(self.q_enc(a), dim=1), F.normalize(self.k_enc(b), dim=1).detach()
        logits = torch.cat([(q * k).sum(1, keepdim=True), q @ self.queue.clone()], dim=1) / 0.1
        p = int(self.ptr)
        self.queue[:, p:p + len(k)] = k.t()
        self.ptr[0] = (p + len(k)) % self.queue.shape[1]
        return logits


def loop_momentum_queue():
    torch.manual_seed(11)
    x = torch.randn(48, 10)
    loader = DataLoader(TensorDataset(x), batch_size=6, shuffle=True)
    model = MomentumQueue()
    opt = torch.optim.SGD(model.q_enc.parameters(), lr=0.05)
    losses = []

    def train():
        for (xb,) in loader:
            logits = model(xb + 0.1 * torch.randn_like(xb), xb + 0.1 * torch.randn_like(xb))
            loss = F.cross_entropy(logits, torch.zeros(len(xb), dtype=torch.long))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    return model, opt, train


class MinibatchStdCritic(nn.Module):
    """A GAN discriminator with a minibatch-stddev feature (the batch's spread, by design)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2))
        self.out = nn.Linear(33, 1)

    def forward(self, x):
        h = self.body(x)
        spread = h.std(dim=0).mean().expand(len(h), 1)
        return self.out(torch.cat([h, spread], dim=1))


def loop_gan_minibatch_std():
    torch.manual_seed(12)
    real = torch.randn(64, 16) * 0.5 + 1
    loader = DataLoader(TensorDataset(real), batch_size=8, shuffle=True)
    g = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 16))
    d = MinibatchStdCritic()
    opt_g, opt_d = torch.optim.Adam(g.parameters(), lr=1e-3), torch.optim.Adam(d.parameters(), lr=1e-3)

    def train():
        for (xb,) in loader:
            fake = g(torch.randn(len(xb), 4))
            ones, zeros = torch.ones(len(xb), 1), torch.zeros(len(xb), 1)
            loss_d = (F.binary_cross_entropy_with_logits(d(xb), ones)
                      + F.binary_cross_entropy_with_logits(d(fake.detach()), zeros))
            opt_d.zero_grad()
            loss_d.backward()
            opt_d.step()
            loss_g = F.binary_cross_entropy_with_logits(d(fake), ones)
            opt_g.zero_grad()
            loss_g.backward()
            opt_g.step()
    return [g, d], [opt_g, opt_d], train
