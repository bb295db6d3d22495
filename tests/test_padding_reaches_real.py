"""A module told where its input's padding is (lengths, or a 0/1 mask) whose real-position
outputs still depend on the padded values (`silent.padding_reaches_real`), written as users write
it: a per-utterance feature normaliser whose masked mean sums every frame, and a masked mean
pooling that multiplies by the mask after the sum. The look-alikes stay quiet: the padding zeroed
before the sums, a pooling that masks first, and a batch whose padding already holds zeros."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

HERE = str(Path(__file__))


def line_of(marker: str) -> int:
    lines = Path(HERE).read_text(encoding="utf-8").splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"# {marker}"))


class Normalise(nn.Module):
    """Per-channel mean/std over the valid frames of each utterance: (B, C, T), lengths (B,)."""

    def __init__(self, zero_padding: bool) -> None:
        super().__init__()
        self.zero_padding = zero_padding

    def forward(self, feats, lengths):
        mask = (torch.arange(feats.shape[-1]) < lengths[:, None]).unsqueeze(1)
        if self.zero_padding:
            feats = feats.masked_fill(~mask, 0.0)
        n = mask.sum(-1, keepdim=True)
        mean = feats.sum(-1, keepdim=True) / n
        var = ((feats - mean).masked_fill(~mask, 0.0) ** 2).sum(-1, keepdim=True) / n
        return ((feats - mean) / (var.sqrt() + 1e-5)).masked_fill(~mask, 0.0)


class MaskedPool(nn.Module):
    """Mean over the real tokens of (B, T, D) with a (B, T) 0/1 mask."""

    def __init__(self, mask_first: bool) -> None:
        super().__init__()
        self.mask_first = mask_first

    def forward(self, h, mask):
        m = mask.unsqueeze(-1).float()
        if self.mask_first:
            return (h * m).sum(1) / m.sum(1)
        return h.sum(1) / m.sum(1)


class Speech(nn.Module):
    def __init__(self, zero_padding: bool) -> None:
        super().__init__()
        self.norm = Normalise(zero_padding)
        self.conv = nn.Conv1d(8, 16, 3, padding=1)
        self.out = nn.Linear(16, 4)

    def forward(self, feats, lengths):
        x = self.norm(feats, lengths)  # normaliser call
        mask = (torch.arange(x.shape[-1]) < lengths[:, None]).unsqueeze(1).float()
        h = torch.relu(self.conv(x)) * mask
        return self.out(h.sum(-1) / mask.sum(-1))


class Tagger(nn.Module):
    def __init__(self, mask_first: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(30, 16)
        self.proj = nn.Linear(16, 16)
        self.pool = MaskedPool(mask_first)
        self.out = nn.Linear(16, 3)

    def forward(self, ids, mask):
        h = torch.tanh(self.proj(self.embed(ids)))
        return self.out(self.pool(h, mask))  # pooling call


def speech_batch(g: torch.Generator, pad_value: float):
    lengths = torch.randint(5, 20, (8,), generator=g)
    feats = torch.full((8, 8, int(lengths.max())), pad_value)  # log-mel of silence: log(1e-7)
    for i, n in enumerate(lengths.tolist()):
        feats[i, :, :n] = torch.randn(8, n, generator=g) - 4.0
    return feats, lengths, torch.randint(0, 4, (8,), generator=g)


def train_speech(zero_padding: bool, pad_value: float = -16.1):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Speech(zero_padding)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    losses = []
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            feats, lengths, y = speech_batch(g, pad_value)
            loss = F.cross_entropy(model(feats, lengths), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return s.report, losses


def plain_speech_losses(zero_padding: bool) -> list[float]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Speech(zero_padding)
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    losses = []
    for _ in range(4):
        feats, lengths, y = speech_batch(g, -16.1)
        loss = F.cross_entropy(model(feats, lengths), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_tagger(mask_first: bool):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    model = Tagger(mask_first)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            lengths = torch.randint(2, 10, (8,), generator=g)
            mask = (torch.arange(int(lengths.max())) < lengths[:, None]).long()
            ids = torch.randint(1, 30, mask.shape, generator=g) * mask  # pad id 0
            loss = F.cross_entropy(model(ids, mask), torch.randint(0, 3, (8,), generator=g))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


def leaks(report):
    return [f for f in report if f.code == "silent.padding_reaches_real"]


def test_normaliser_that_sums_padded_frames_is_named_at_its_call():
    report, _ = train_speech(zero_padding=False)
    (f,) = leaks(report)
    assert f.severity is Severity.WARNING
    assert f.line == line_of("normaliser call")
    assert f.module == "norm"
    ev = f.evidence
    assert ev["module"] == "norm (Normalise)" and tuple(ev["input_shape"][:2]) == (8, 8)
    assert ev["padding_from"].startswith("argument 1 (lengths")
    assert ev["padding_max_abs"] == pytest.approx(16.1, abs=1e-3)
    assert ev["max_abs_real_output_change"] > 0.1
    assert "padded positions to zero changes its outputs at the real positions" in f.message


def test_the_check_leaves_the_numbers_alone():
    assert train_speech(zero_padding=False)[1] == plain_speech_losses(False)


def test_pooling_that_sums_padded_tokens_is_found_through_a_mask():
    (f,) = leaks(train_tagger(mask_first=False))
    assert f.line == line_of("pooling call")
    assert f.module == "pool" and f.evidence["padding_from"].startswith("argument 1 (mask")


@pytest.mark.parametrize("case", ["zeroed_first", "zero_padding"])
def test_speech_look_alikes_are_quiet(case):
    report, _ = train_speech(zero_padding=case == "zeroed_first", pad_value=0.0 if case == "zero_padding" else -16.1)
    assert leaks(report) == []


def test_pooling_that_masks_first_is_quiet():
    assert leaks(train_tagger(mask_first=True)) == []
