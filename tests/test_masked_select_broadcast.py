"""A masked_select whose input and mask both broadcast (`silent.loss_broadcast`, variant select),
written as users write a per-time-step masked NLL for a padded seq2seq batch: the gathered target
probability kept as a (B, 1) column and selected with the (B,) padding mask gives (B, B), so every
row, pads included, is averaged in and the mask drops nothing. The look-alikes stay quiet: the
column squeezed to (B,), and a (B, D) tensor selected with a (B, 1) mask (broadcast over features)."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

import torchtriage
from torchtriage import Severity

HERE = str(Path(__file__))


def line_of(marker: str) -> int:
    lines = Path(HERE).read_text(encoding="utf-8").splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"# {marker}"))


def masked_nll(probs, target, mask, squeeze: bool, functional: bool):
    picked = torch.gather(probs, 1, target.view(-1, 1))
    if squeeze:
        picked = picked.squeeze(1)
    nll = -torch.log(picked)
    if functional:
        return torch.masked_select(nll, mask).mean(), int(mask.sum())  # functional select
    return nll.masked_select(mask).mean(), int(mask.sum())  # method select


class Step(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 16)
        self.cell = nn.GRUCell(16, 16)
        self.out = nn.Linear(16, 10)

    def forward(self, tok, h):
        h = self.cell(self.embed(tok), h)
        return torch.softmax(self.out(h), -1), h


def train(squeeze: bool, functional: bool = False):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = Step()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            lengths = torch.randint(1, 6, (8,), generator=g)
            target = torch.randint(1, 10, (6, 8), generator=g)
            mask = torch.arange(6)[:, None] < lengths[None, :]
            target = target * mask  # pad id 0 after each reply
            h = torch.zeros(8, 16)
            tok = torch.zeros(8, dtype=torch.long)
            total, n = 0.0, 0
            for t in range(6):
                probs, h = model(tok, h)
                loss_t, k = masked_nll(probs, target[t], mask[t], squeeze, functional)
                total = total + loss_t * k
                n += k
                tok = target[t]
            opt.zero_grad()
            (total / n).backward()
            opt.step()
    return s.report


def selects(report):
    return [f for f in report if f.code == "silent.loss_broadcast"]


def test_column_selected_with_a_row_mask():
    f = selects(train(squeeze=False))[0]
    assert f.severity is Severity.ERROR
    assert f.line == line_of("method select")
    ev = f.evidence
    assert tuple(ev["prediction_shape"]) == (8, 1) and tuple(ev["target_shape"]) == (8,)
    assert tuple(ev["broadcast_shape"]) == (8, 8)
    assert ev["loss_computed"] != "n/a"  # (the aligned replay stops at the next decoder call: n/a)
    assert f.message.startswith("masked_select's input [8, 1] and mask [8] broadcast to [8, 8]")


def test_functional_form_is_found_too():
    assert selects(train(squeeze=False, functional=True))[0].line == line_of("functional select")


def test_squeezed_column_is_quiet():
    assert selects(train(squeeze=True)) == []


def test_mask_broadcast_over_features_is_quiet():
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            x = torch.randn(8, 4)
            keep = torch.rand(8, 1) > 0.3
            loss = (model(x) - x).pow(2).masked_select(keep).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert selects(s.report) == []
