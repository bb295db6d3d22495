"""Per-token next-token losses masked by hand with the inputs' mask instead of the targets'
(`silent.loss_mask_on_inputs`): `loss(logits[:, :-1], ids[:, 1:]) * attention_mask[:, :-1]`
keeps the prediction of the first pad token of every right-padded row. Written as users write
it, in an evaluation loop and in a training step; the look-alikes (the targets' mask, batches
without padding, `ignore_index` labels) stay quiet."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import marked
from torchtriage import Severity

HERE = str(Path(__file__))
PAD = 0


line_of = marked(Path(HERE))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 12)
        self.rnn = nn.GRU(12, 12, batch_first=True)
        self.head = nn.Linear(12, 16)

    def forward(self, input_ids, attention_mask=None):
        return self.head(self.rnn(self.embed(input_ids))[0])


def batch(g: torch.Generator, padded: bool = True):
    lengths = torch.randint(4, 10, (6,), generator=g) if padded else torch.full((6,), 9)
    ids = torch.full((6, int(lengths.max())), PAD)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths.tolist()):
        ids[i, :n] = torch.randint(1, 16, (n,), generator=g)
        mask[i, :n] = 1
    return ids, mask, int((lengths < lengths.max()).sum())


def per_token(model, ids, mask, which):
    logits = model(ids, attention_mask=mask)[:, :-1]
    labels = ids[:, 1:]
    loss_func = nn.CrossEntropyLoss(reduction="none")
    if which == "inputs":
        loss = loss_func(logits.transpose(1, 2), labels) * mask[:, :-1]  # inputs mask
    else:
        loss = loss_func(logits.transpose(1, 2), labels) * mask[:, 1:]  # targets mask
    return loss.sum() / mask[:, 1:].sum()


def evaluate(which: str, padded: bool = True):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(4):  # a training phase with the labels ignored the usual way
            ids, mask, _ = batch(g)
            labels = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
            loss = F.cross_entropy(model(ids, attention_mask=mask)[:, :-1].transpose(1, 2), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
        padded_rows = []
        with torch.no_grad():
            for _ in range(3):
                ids, mask, n = batch(g, padded)
                per_token(model, ids, mask, which)
                padded_rows.append(n)
    return s.report, padded_rows


def train(which: str):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    model = TinyLM()
    opt = torch.optim.SGD(model.parameters(), 0.1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            ids, mask, _ = batch(g)
            loss = per_token(model, ids, mask, which)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


def masks(report):
    return [f for f in report if f.code == "silent.loss_mask_on_inputs"]


def test_evaluation_loss_masked_with_the_inputs_mask_is_named():
    report, padded_rows = evaluate("inputs")
    (f,) = masks(report)
    assert (f.severity, f.line, f.op) == (Severity.WARNING, line_of("inputs mask"), "mul")
    ev = f.evidence
    assert ev["target_shift"] == 1 and ev["mask_equals_inputs_mask"] is True
    assert ev["pad_targets_kept"] == padded_rows[0] > 0  # one pad prediction per padded row
    assert ev["real_targets_dropped"] == 0
    assert f.message == (f"the mask multiplying the per-token losses keeps {padded_rows[0]} position(s) whose target "
                         "is padding (the targets are the inputs shifted by 1, the mask is not)")


def test_training_loss_masked_with_the_inputs_mask_is_named():
    report = train("inputs")
    (f,) = masks(report)
    assert f.line == line_of("inputs mask") and f.evidence["pad_targets_kept"] > 0
    assert [f.code for f in report if f.severity is not Severity.INFO] == ["silent.loss_mask_on_inputs"]
    assert torch._C._len_torch_function_stack() == 0


@pytest.mark.parametrize("run", ["eval_targets", "eval_unpadded", "train_targets"])
def test_look_alikes_are_quiet(run):
    report = {"eval_targets": lambda: evaluate("targets")[0], "eval_unpadded": lambda: evaluate("inputs", False)[0],
              "train_targets": lambda: train("targets")}[run]()
    assert masks(report) == []
    assert [f for f in report if f.severity is not Severity.INFO] == []  # (no loss graph kept by the follower)
    assert torch._C._len_torch_function_stack() == 0  # nothing of ours left on the mode stack
