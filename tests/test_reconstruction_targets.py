"""Targets equal to the inputs (`_silent/_whole.py`): an error for a next-token model that reads
the tokens up to each position (it learns to copy), a reconstruction for a model whose outputs
read the whole sequence (a sequence autoencoder), where its unmasked padding is an info."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage

V, PAD = 10, 0


def padded(b=8, t=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, V, (b, t), generator=g)
    lengths = torch.randint(3, 7, (b,), generator=g)
    ids[torch.arange(t)[None, :] >= lengths[:, None]] = PAD
    return ids


class CausalLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16)
        self.rnn = nn.GRU(16, 16, batch_first=True)
        self.head = nn.Linear(16, V)

    def forward(self, ids):
        return self.head(self.rnn(self.emb(ids))[0])


class SeqAutoencoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16, padding_idx=PAD)
        self.enc = nn.GRU(16, 16, batch_first=True)
        self.dec = nn.GRU(16, 16, batch_first=True)
        self.head = nn.Linear(16, V)

    def forward(self, ids):
        _, h = self.enc(self.emb(ids))
        shifted = F.pad(ids[:, :-1], (1, 0), value=PAD)  # teacher forcing: the decoder reads the previous token
        return self.head(self.dec(self.emb(shifted), h)[0])


def train(model, ids):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            loss = F.cross_entropy(model(ids).reshape(-1, V), ids.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return {(f.code, f.severity.value) for f in s.report.findings}


def test_a_causal_model_trained_on_its_own_tokens_is_still_an_error():
    torch.manual_seed(0)
    assert ("silent.labels_not_shifted", "error") in train(CausalLM(), padded())


def test_a_sequence_autoencoder_reconstructing_its_input_is_no_shift_error():
    torch.manual_seed(0)
    model = SeqAutoencoder()
    found = train(model, padded())
    assert not [c for c in found if c[0] == "silent.labels_not_shifted"]
    assert ("silent.pad_in_loss", "info") in found
    assert not [c for c in found if c[1] in ("warning", "error")], found
    assert model.training and all(m.training for m in model.modules())  # the probe put the modes back


def _fit(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(2):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return {(f.code, f.severity.value) for f in s.report.findings}


class PerEdge(nn.Module):
    def __init__(self, k=30, classes=3):
        super().__init__()
        self.k, self.classes = k, classes
        self.net = nn.Linear(8, k * classes)

    def forward(self, x):
        return self.net(x).view(-1, self.classes, self.k)


def test_a_frequent_class_of_a_multi_output_target_is_no_padding():
    g = torch.Generator().manual_seed(0)
    y = torch.multinomial(torch.tensor([0.2, 0.2, 0.6]), 64 * 30, replacement=True, generator=g).view(64, 30)
    found = _fit(PerEdge(), torch.randn(64, 8, generator=g), y)
    assert not [c for c in found if c[0] == "silent.pad_in_loss"]


def test_padded_caption_targets_of_an_image_model_are_still_pad_in_the_loss():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(1, 3, (64, 30), generator=g)
    y[torch.arange(30)[None, :] >= torch.randint(5, 20, (64, 1), generator=g)] = 0  # trailing PAD
    found = _fit(PerEdge(), torch.randn(64, 8, generator=g), y)
    assert ("silent.pad_in_loss", "warning") in found
