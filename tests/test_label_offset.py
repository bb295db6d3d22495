"""The offset between the tokens a model reads and the targets its loss compares
(`data.target_misaligned`, variant `tokens`, `_silent/_offset.py`): exactly one for a causal LM."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import torchtriage
from _lines import line_in

V = 40


def _stream(n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(V, generator=g)
    toks = torch.empty(n, dtype=torch.long)
    toks[0] = 3
    noise = torch.randint(0, V, (n,), generator=g)
    keep = torch.rand(n, generator=g) < 0.9
    for i in range(1, n):
        toks[i] = perm[toks[i - 1]] if keep[i] else noise[i]
    return toks


class Windows(Dataset):
    """Rows of 25 tokens; `shifted`: labels = row[1:] (the data shifts), else labels = row[:-1]."""

    def __init__(self, shifted: bool) -> None:
        self.rows = _stream(25 * 128).reshape(128, 25)
        self.shifted = shifted

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        row = self.rows[i]
        return {"input_ids": row[:-1], "labels": row[1:] if self.shifted else row[:-1]}


class GRULM(nn.Module):
    """A causal LM that shifts its labels inside forward, as Hugging Face models do."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.rnn = nn.GRU(32, 32, batch_first=True)
        self.head = nn.Linear(32, V)

    def forward(self, input_ids, labels=None):
        logits = self.head(self.rnn(self.emb(input_ids))[0])
        if labels is None:
            return logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))  # LOSS
        return loss, logits


def _train(shifted: bool, steps: int = 6):
    model = GRULM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = DataLoader(Windows(shifted), batch_size=16, shuffle=True)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i, batch in enumerate(loader):
            loss, _ = model(**batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i == steps:
                break
    return s.report


def _offset(report):
    return [f for f in report.findings if f.code == "data.target_misaligned"]


def test_labels_shifted_by_the_dataset_and_again_by_the_models_loss():
    [f] = _offset(_train(True))
    at = line_in(__file__, "  # LOSS", ending=True)
    assert (f.severity.value, f.category.value, f.line) == ("warning", "data", at)
    assert f.evidence["offset_found"] == 2 and f.evidence["share_equal_at_offset"]["2"] == 1.0
    assert f.message.startswith("cross_entropy targets are the input tokens moved by 2 positions, not 1")
    assert "labels[..., 1:]" in f.cause and "input_ids" in f.next_check


def test_labels_equal_to_the_inputs_shifted_once_by_the_model_are_quiet():
    assert not _offset(_train(False))


def test_a_loop_that_shifts_pre_shifted_targets_itself():
    """The variant with the loss in the loop: x = row[:-1], y = row[1:] from the data, and the
    loop slices both again."""
    rows = _stream(17 * 96).reshape(96, 17)
    model = nn.Sequential(nn.Embedding(V, 32), nn.Linear(32, V))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(0, 96, 16):
            x, y = rows[i:i + 16, :-1], rows[i:i + 16, 1:]
            logits = model(x)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), y[:, 1:].reshape(-1))  # LOOP
            opt.zero_grad()
            loss.backward()
            opt.step()
    [f] = _offset(s.report)
    assert f.line == line_in(__file__, "  # LOOP", ending=True) and f.evidence["offset_found"] == 2


def test_next_token_losses_done_once_and_a_two_ahead_head_stay_quiet():
    rows = _stream(17 * 96).reshape(96, 17)
    emb, head, head2 = nn.Embedding(V, 32), nn.Linear(32, V), nn.Linear(32, V)
    model = nn.ModuleDict({"emb": emb, "head": head, "head2": head2})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, x):
            h = emb(x)
            return head(h), head2(h)

    net = Net()
    with torchtriage.watch(net, opt, on_anomaly="record", report=False) as s:
        for i in range(0, 96, 16):
            x, y = rows[i:i + 16, :-1], rows[i:i + 16, 1:]  # shifted once by the data
            logits, ahead = net(x)
            loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))  # full logits against y
            # a multi-token head: position t predicts t + 2, only inside the row (T - 2 targets)
            loss = loss + F.cross_entropy(ahead[:, :-2].reshape(-1, V), x[:, 2:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not _offset(s.report)
