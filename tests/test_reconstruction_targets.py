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
