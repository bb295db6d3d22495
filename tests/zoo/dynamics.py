"""Training loops that neither crash nor learn, written as users write them (issue 19).

Each `loop_*` builds its model(s) and optimizer and returns `(models, optimizers, train)`;
the tests run `train()` inside `torchtriage.watch(...)`. Each is named after its bug; the line
to fix carries a `# BUG` comment (the tests find its number by its text).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def _blobs(n: int = 256, classes: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    return x, y % classes


# ---------------------------------------------------------------------------- the three examples
def loop_epoch_scheduler_stepped_per_batch():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.1)  # decay every 10 epochs
    x, y = _blobs()
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)

    def train():
        for epoch in range(2):
            for xb, yb in loader:
                loss = F.cross_entropy(model(xb), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()  # BUG: per batch (StepLR counts epochs)
    return model, opt, train


def loop_lr_too_high():
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.2)  # BUG: above 2 / curvature
    x = torch.randn(64, 8)
    y = x.sum(1, keepdim=True)

    def train():
        for _ in range(60):
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


def loop_accuracy_broadcasts():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = _blobs()
    accs = []

    def train():
        for _ in range(5):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(x).argmax(dim=1, keepdim=True)
            accs.append((pred == y).float().mean().item())  # BUG: (N, 1) == (N,)
        model.train()
    train.accs = accs  # type: ignore[attr-defined]
    return model, opt, train


# ---------------------------------------------------------------------------- schedules
def loop_cosine_t_max_in_epochs_per_batch():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    epochs = 10
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    x, y = _blobs()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)

    def train():
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()  # BUG: per batch, T_max counts epochs
    return model, opt, train


def loop_scheduler_before_optimizer():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=40)
    x, y = _blobs()

    def train():
        for i in range(30):
            loss = F.cross_entropy(model(x[i:i + 8]), y[i:i + 8])
            opt.zero_grad()
            loss.backward()
            sched.step()  # BUG: before opt.step()
            opt.step()
    return model, opt, train


def _linear_schedule_with_warmup(opt, num_warmup_steps, num_training_steps):
    def factor(step):
        if step < num_warmup_steps:
            return step / max(1, num_warmup_steps)
        return max(0.0, (num_training_steps - step) / max(1, num_training_steps - num_warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def loop_warmup_never_ends(lr: float = 1e-3):
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    steps = 120
    sched = _linear_schedule_with_warmup(opt, num_warmup_steps=1000, num_training_steps=10_000)  # BUG
    x, y = _blobs()

    def train():
        for i in range(steps):
            b = slice((i * 8) % 256, (i * 8) % 256 + 8)
            loss = F.cross_entropy(model(x[b]), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return model, opt, train


def loop_lr_decays_to_zero_early():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    epochs, batches = 3, 16
    sched = _linear_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=epochs)  # BUG: epochs, not steps
    x, y = _blobs()

    def train():
        for _ in range(epochs):
            for i in range(batches):
                loss = F.cross_entropy(model(x[i * 8:(i + 1) * 8]), y[i * 8:(i + 1) * 8])
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
    return model, opt, train


# ---------------------------------------------------------------------------- not learning
def loop_lr_too_low():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-7)  # BUG: far too low
    x, y = _blobs()

    def train():
        for i in range(60):
            b = slice((i * 16) % 256, (i * 16) % 256 + 16)
            loss = F.cross_entropy(model(x[b]), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


def loop_clipped_to_nothing():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _blobs()

    def train():
        for i in range(60):
            b = slice((i * 16) % 256, (i * 16) % 256 + 16)
            loss = F.cross_entropy(model(x[b]), y[b])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e-6)  # BUG: max_norm far too small
            opt.step()
    return model, opt, train


def loop_inputs_centered_per_sample():
    model = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    g = torch.Generator().manual_seed(1)
    x = torch.rand(128, 1, generator=g) * 4
    y = 2 * x + 1

    def train():
        for _ in range(80):
            xb = x - x.mean(dim=1, keepdim=True)  # BUG: one feature centered per sample is all zeros
            loss = F.mse_loss(model(xb), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


def loop_labels_shuffled_apart():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = _blobs(512)
    xs = DataLoader(TensorDataset(x), batch_size=32, shuffle=True)
    ys = DataLoader(TensorDataset(y), batch_size=32, shuffle=True)  # BUG: shuffled apart from x

    def train():
        for _ in range(5):
            for (xb,), (yb,) in zip(xs, ys):
                loss = F.cross_entropy(model(xb), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()
    return model, opt, train


# ---------------------------------------------------------------------------- gradients
def loop_deep_sigmoid_stack():
    layers = []
    for _ in range(12):
        layers += [nn.Linear(16, 16), nn.Sigmoid()]  # BUG: saturating, no residual / norm
    model = nn.Sequential(nn.Linear(8, 16), *layers, nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = _blobs()

    def train():
        for i in range(3):
            loss = F.cross_entropy(model(x[:32]), y[:32])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


class CharRNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 16)
        self.rnn = nn.RNN(16, 64, nonlinearity="relu", batch_first=True)
        self.head = nn.Linear(64, 20)

    def forward(self, ids):
        out, _ = self.rnn(self.embed(ids))
        return self.head(out)


def loop_rnn_without_clipping():
    torch.manual_seed(0)
    model = CharRNN()
    with torch.no_grad():
        model.rnn.weight_hh_l0.copy_(torch.eye(64) * 1.02)  # IRNN-style identity init, a little past 1
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    short = torch.randint(0, 20, (8, 6))
    long = torch.randint(0, 20, (8, 200))

    def train():
        for i in range(20):
            ids = long if i == 15 else short  # one long sequence among short ones
            logits = model(ids[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, 20), ids[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()  # BUG: no clip_grad_norm_ for an RNN
            opt.step()
    return model, opt, train


def loop_clip_before_backward():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _blobs()

    def train():
        for i in range(4):
            opt.zero_grad()
            loss = F.cross_entropy(model(x[:32]), y[:32])
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # BUG: before backward
            loss.backward()
            opt.step()
    return model, opt, train


def loop_clip_after_step():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _blobs()

    def train():
        for i in range(4):
            loss = F.cross_entropy(model(x[:32]), y[:32])
            loss.backward()
            opt.step()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)  # BUG: after step
            opt.zero_grad()
    return model, opt, train


def _accumulating(opt_cls, **kw):
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = opt_cls(model.parameters(), **kw)
    x, y = _blobs()
    accum = 4

    def train():
        for step in range(3):
            for k in range(accum):
                b = slice(32 * step + 8 * k, 32 * step + 8 * (k + 1))
                loss = F.cross_entropy(model(x[b]), y[b])
                loss.backward()  # BUG: not divided by accum
            opt.step()
            opt.zero_grad()
    return model, opt, train


def loop_accumulation_not_divided_sgd():
    return _accumulating(torch.optim.SGD, lr=0.05)


def loop_accumulation_not_divided_adam():
    return _accumulating(torch.optim.Adam, lr=1e-3)


# ---------------------------------------------------------------------------- softmax dims, metrics
class OneUnitClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return F.log_softmax(self.net(x), dim=1)  # BUG: one unit


def loop_log_softmax_over_one_unit():
    model = OneUnitClassifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(32, 8)
    y = (x[:, 0] > 0).float()

    def train():
        for _ in range(3):
            loss = -(model(x).squeeze(1) * y).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


def loop_softmax_over_batch():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _blobs()

    def train():
        for _ in range(3):
            probs = F.softmax(model(x[:32]), dim=0)  # BUG: dim 0 is the batch
            loss = F.nll_loss(probs.log(), y[:32])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


def loop_log_softmax_module_over_batch():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4), nn.LogSoftmax(dim=0))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _blobs()

    def train():
        for _ in range(3):
            loss = F.nll_loss(model(x[:32]), y[:32])  # BUG: the model's LogSoftmax(dim=0)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


def loop_argmax_over_batch_in_validation():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = _blobs()
    accs = []

    def train():
        for epoch in range(2):
            for i in range(4):
                loss = F.cross_entropy(model(x[i * 32:(i + 1) * 32]), y[i * 32:(i + 1) * 32])
                opt.zero_grad()
                loss.backward()
                opt.step()
            model.eval()
            with torch.no_grad():
                pred = model(x[128:]).argmax(0)  # BUG: argmax over the batch
                accs.append((pred == y[128:][: pred.numel()]).float().mean().item())
            model.train()
    return model, opt, train


def loop_validation_in_train_mode():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = _blobs()

    def train():
        for epoch in range(2):
            for i in range(4):
                loss = F.cross_entropy(model(x[i * 32:(i + 1) * 32]), y[i * 32:(i + 1) * 32])
                opt.zero_grad()
                loss.backward()
                opt.step()
            with torch.no_grad():  # BUG: model.eval() missing
                correct = sum((model(x[j:j + 64]).argmax(1) == y[j:j + 64]).sum().item() for j in (128, 192))
            train.acc = correct / 128  # type: ignore[attr-defined]
    return model, opt, train


# ---------------------------------------------------------------------------- sequence model
class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 40, d: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, 32, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.1, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids, mask=None):
        h = self.embed(ids) + self.pos[:, : ids.shape[1]]
        return self.head(self.blocks(h, mask=mask))


def loop_gpt(causal_mask: bool):
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, 40, (4, 8, 17))
    T = 16
    mask = torch.nn.Transformer.generate_square_subsequent_mask(T)

    def train():
        for i in range(4):
            ids = data[i]
            if causal_mask:
                logits = model(ids[:, :-1], mask=mask)
            else:
                logits = model(ids[:, :-1])  # BUG: no causal mask
            loss = F.cross_entropy(logits.reshape(-1, 40), ids[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


class HandAttention(nn.Module):
    def __init__(self, d: int, T: int, dim: int) -> None:
        super().__init__()
        self.qkv, self.proj, self.dim = nn.Linear(d, 3 * d), nn.Linear(d, d), dim
        self.register_buffer("causal", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, h):
        t = h.shape[1]
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        att = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~self.causal[:t, :t], float("-inf"))
        att = torch.softmax(att, dim=self.dim)  # BUG: dim=-2 mixes the queries, later ones included
        return self.proj(att @ v)


class LossInsideLM(nn.Module):
    """A hand-written causal attention LM that computes its loss inside forward, as minGPT and
    transformers models do (`logits, loss = model(idx, targets)`, `model(input_ids=, labels=)`)."""

    def __init__(self, query_axis_softmax: bool, vocab: int = 24, d: int = 16, T: int = 12) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, d), nn.Embedding(T, d)
        self.attn, self.head = HandAttention(d, T, -2 if query_axis_softmax else -1), nn.Linear(d, vocab)

    def forward(self, input_ids, labels=None):
        h = self.embed(input_ids) + self.pos(torch.arange(input_ids.shape[1], device=input_ids.device))
        logits = self.head(h + self.attn(h))
        loss = None if labels is None else F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                           labels[:, 1:].reshape(-1))
        return logits, loss


def loop_loss_inside_forward(bug: bool, by_keyword: bool):
    torch.manual_seed(0)
    model = LossInsideLM(query_axis_softmax=bug)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, 24, (3, 8, 12))

    def train():
        for ids in data:
            if by_keyword:
                _, loss = model(input_ids=ids, labels=ids)
            else:
                _, loss = model(ids, ids)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train
