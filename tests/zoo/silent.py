"""Silent bugs: tiny real models and loops that run, raise nothing, and are wrong.

Each broken model / loop is named after its bug; `Clean*` and `clean_*` carry none.
Loops take a `steps` count and return nothing; tests run them inside `torchtriage.watch`.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------------- models
class RegressionMLP(nn.Module):
    """(N, 4) -> (N, 1): a regression head whose output keeps a trailing axis."""

    def __init__(self, features: int = 4) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)


class Classifier(nn.Module):
    def __init__(self, features: int = 6, classes: int = 4) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, 16), nn.ReLU())
        self.head = nn.Linear(16, classes)

    def forward(self, x):
        return self.head(self.body(x))


class DoubleSoftmaxClassifier(Classifier):
    """Returns probabilities, which the loop then gives to cross_entropy."""

    def forward(self, x):
        return torch.softmax(super().forward(x), dim=1)


class SigmoidBeforeLogitsLoss(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(5, 1)

    def forward(self, x):
        return torch.sigmoid(self.lin(x)).squeeze(-1)


class HandWrittenSoftmaxNearOverflow(nn.Module):
    """Scores offset by +70 (un-normalized features), then exp(s) / exp(s).sum(): finite, about to overflow."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 4)

    def forward(self, x):
        s = self.lin(x) + 70.0
        e = torch.exp(s)
        return e / e.sum(dim=-1, keepdim=True)


class TinyLM(nn.Module):
    """Embedding + one self-attention layer + head. `causal=False` is the future-seeing bug;
    `use_mask=False` ignores the attention mask (the padding-leak bug)."""

    def __init__(self, vocab: int = 32, dim: int = 16, *, causal: bool = True, use_mask: bool = True) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(64, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab)
        self.causal, self.use_mask = causal, use_mask

    def forward(self, ids, attention_mask=None):
        b, t = ids.shape
        h = self.emb(ids) + self.pos(torch.arange(t, device=ids.device))
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
        if self.causal:
            future = torch.ones(t, t, dtype=torch.bool, device=ids.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        if attention_mask is not None and self.use_mask:
            scores = scores.masked_fill(attention_mask[:, None, :] == 0, float("-inf"))
        att = torch.softmax(scores, dim=-1)
        return self.head(h + self.out(att @ v))


def LeakyAttentionLM() -> TinyLM:  # named after its bug, like the classes
    return TinyLM(causal=False)


def PadLeakingLM() -> TinyLM:
    """A bidirectional encoder that ignores its attention mask."""
    return TinyLM(causal=False, use_mask=False)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(2))
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.drop(self.features(x).flatten(1)))


# ---------------------------------------------------------------------------------- data
def regression_data(n: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = x.sum(dim=1) + 0.1 * torch.randn(n, generator=g)
    return x, y


def padded_tokens(b: int = 8, t: int = 12, vocab: int = 32, pad: int = 0, seed: int = 0):
    """Token rows of lengths 4..8 padded with `pad` at the end, and their attention mask."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (b, t), generator=g)
    lengths = torch.randint(4, 9, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).long()
    return ids.masked_fill(mask == 0, pad), mask


# ---------------------------------------------------------------------------------- loops
def broadcast_hand_written_loss(model, opt, steps=3):
    x, y = regression_data()
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()  # (8, 1) - (8,) -> (8, 8)
        loss.backward()
        opt.step()


def broadcast_builtin_loss(model, opt, steps=2):
    x, y = regression_data()
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()


def classify(model, opt, *, loss, targets, features=6, steps=2, n=16):
    """Train with `torch.nn.functional.<loss>` (looked up at call time, as user code does)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, features, generator=g)
    for _ in range(steps):
        opt.zero_grad()
        loss_value = getattr(F, loss)(model(x), targets)
        loss_value.backward()
        opt.step()


class LogisticRegression(nn.Module):
    def __init__(self, features: int = 5) -> None:
        super().__init__()
        self.lin = nn.Linear(features, 1)

    def forward(self, x):
        return self.lin(x).squeeze(-1)


def lm_unshifted_labels(model, opt, steps=2):
    ids, _ = padded_tokens()
    for _ in range(steps):
        opt.zero_grad()
        logits = model(ids)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1))
        loss.backward()
        opt.step()


def lm_pad_in_loss(model, opt, steps=2):
    ids, _ = padded_tokens()
    inputs, labels = ids[:, :-1], ids[:, 1:]  # shifted, but PAD (0) stays in the labels
    for _ in range(steps):
        opt.zero_grad()
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        opt.step()


def no_zero_grad(model, opt, steps=3):
    x, y = regression_data()
    for _ in range(steps):
        loss = F.mse_loss(model(x).squeeze(-1), y)
        loss.backward()
        opt.step()


def loss_graph_kept(model, opt, steps=4):
    x, y = regression_data()
    total = 0.0
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x).squeeze(-1), y)
        loss.backward()
        opt.step()
        total += loss  # keeps every step's graph alive
    return total


def eval_mode_while_training(model, opt, steps=2):
    model.eval()
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(8, 1, 6, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def train_mode_while_evaluating(model, opt, steps=2):
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(8, 1, 6, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    with torch.no_grad():  # evaluation, but model.eval() was forgotten
        for _ in range(2):
            model(x).argmax(1)


def target_leaked_into_input(model, opt, steps=20):
    g = torch.Generator().manual_seed(3)
    feats = torch.randn(32, 3, generator=g)
    y = torch.randn(32, generator=g)
    x = torch.cat([feats, y[:, None]], dim=1)  # the target is column 3 of the input
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model(x).squeeze(-1), y)
        loss.backward()
        opt.step()


def near_overflow_softmax(model, opt, steps=2):
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(8, 6, generator=g), torch.randint(0, 4, (8,), generator=g)
    for _ in range(steps):
        opt.zero_grad()
        loss = F.nll_loss(torch.log(model(x)), y)
        loss.backward()
        opt.step()


# ---------------------------------------------------------------------------------- clean loops
def clean_mlp_regression(model, opt, steps=4):
    x, y = regression_data()
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x).squeeze(-1) - y) ** 2).mean()
        loss.backward()
        opt.step()


def clean_classifier(model, opt, steps=4):
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(16, 6, generator=g), torch.randint(0, 4, (16,), generator=g)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        model(x).argmax(1)


def clean_causal_lm(model, opt, steps=4):
    ids, mask = padded_tokens()
    inputs, labels = ids[:, :-1], ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
    for _ in range(steps):
        opt.zero_grad()
        logits = model(inputs, attention_mask=mask[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        loss.backward()
        opt.step()


def clean_cnn_batchnorm(model, opt, steps=3):
    g = torch.Generator().manual_seed(6)
    x, y = torch.randn(8, 1, 6, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
    for _epoch in range(2):
        model.train()
        for _ in range(steps):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            for _ in range(2):
                model(x).argmax(1)


def clean_mixed_precision(model, opt, steps=4):
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(16, 6, generator=g), torch.randint(0, 4, (16,), generator=g)
    for _ in range(steps):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()


class EncoderLM(nn.Module):
    """nn.TransformerEncoder LM. `causal=False` is the future-seeing bug; `use_pad=False` drops the
    key padding mask (padding leaks when attention is bidirectional)."""

    def __init__(self, *, causal: bool = True, use_pad: bool = True) -> None:
        super().__init__()
        self.causal, self.use_pad = causal, use_pad
        self.emb = nn.Embedding(20, 16)
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 20)

    def forward(self, ids, attention_mask=None):
        t = ids.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t) if self.causal else None
        pad = None
        if attention_mask is not None and self.use_pad:
            pad = torch.zeros(attention_mask.shape).masked_fill(attention_mask == 0, float("-inf"))
        return self.head(self.enc(self.emb(ids), mask=mask, src_key_padding_mask=pad, is_causal=self.causal))


def hand_softmax_in_the_loss(model, opt, steps=3):
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        scores = model(torch.randn(8, 6, generator=g)) + 75.0
        e = torch.exp(scores)  # BUG: 75 + log(4) is 12 below float32's exp limit
        p = e / e.sum(-1, keepdim=True)
        loss = -torch.log(p[:, 0]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
