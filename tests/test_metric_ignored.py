"""A metric over target positions the training leaves out (`_dynamics/_ignored.py`): positions the
loss ignores (ignore_index) or trailing padding of the model's embedding, counted by an accuracy.
Each loop is written as users write it; the finding's code, severity, line and evidence are
asserted, and look-alike correct metrics stay quiet."""

from __future__ import annotations

import inspect
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage

PAD, V = 0, 12


def here(fn, mark: str = "# HERE") -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if line.rstrip().endswith(mark))


def batches(n=4, b=8, t=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = torch.randint(3, t - 2, (b,), generator=g)
        ids = torch.randint(1, V, (b, t), generator=g)
        ids[torch.arange(t)[None, :] >= lengths[:, None]] = PAD
        out.append(ids)
    return out


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16, padding_idx=PAD)
        self.rnn = nn.GRU(16, 16, batch_first=True)
        self.head = nn.Linear(16, V)

    def forward(self, ids):
        return self.head(self.rnn(self.emb(ids))[0])


def watch(model, opt):
    return torchtriage.watch(model, opt, on_anomaly="record", report=False)


def metric_findings(session):
    return [f for f in session.report.findings if f.code == "silent.metric_counts_ignored"]


def alarms(session):
    return [(f.code, f.severity.value) for f in session.report.findings if f.severity.value in ("warning", "error")]


def train_accuracy_over_minus_100():
    torch.manual_seed(0)
    model = Tagger()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with watch(model, opt) as s:
        for ids in batches():
            labels = ids.clone()
            labels[labels == PAD] = -100
            logits = model(ids)
            loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
            acc = (logits.argmax(-1) == labels).float().mean()  # HERE
            opt.zero_grad()
            loss.backward()
            opt.step()
            acc.item()
    return s


def test_a_training_accuracy_that_counts_the_ignored_labels_is_an_error():
    s = train_accuracy_over_minus_100()
    (f,) = metric_findings(s)
    assert (f.severity.value, f.line, f.op) == ("error", here(train_accuracy_over_minus_100), "eq")
    ev = f.evidence
    assert ev["ignored_by"] == "ignore_index -100" and ev["in"] == "training step"
    assert ev["target_shape"] == (8, 10) and 0 < ev["ignored_positions"] < ev["positions"] == 80
    assert float(ev["match_rate_kept_positions"]) > float(ev["match_rate_all_positions"])


def eval_loop_counts_numel():
    torch.manual_seed(0)
    model = Tagger()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss(ignore_index=-1)
    with watch(model, opt) as s:
        for ids in batches(n=2):
            tags = torch.where(ids == PAD, -1, ids % 3)
            loss = crit(model(ids).transpose(1, 2), tags)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        accs = []
        with torch.no_grad():
            for ids in batches(n=2, seed=1):
                tags = torch.where(ids == PAD, -1, ids % 3)
                pred = model(ids).argmax(dim=2)
                acc = torch.eq(pred, tags).sum() / tags.numel()  # HERE
                accs.append(acc.item())
    return s


def test_an_evaluation_accuracy_divided_by_numel_with_a_custom_ignore_index():
    s = eval_loop_counts_numel()
    (f,) = metric_findings(s)
    assert (f.severity.value, f.line) == ("error", here(eval_loop_counts_numel))
    assert f.evidence["ignored_by"] == "ignore_index -1" and f.evidence["in"] == "evaluation"


def reconstruction_counts_padding():
    torch.manual_seed(0)
    model = Tagger()
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    with watch(model, opt) as s:
        for _ in range(3):
            for ids in batches():
                loss = F.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
                opt.zero_grad()
                loss.backward()
                opt.step()
        with torch.no_grad():
            for ids in batches(n=1, seed=3):
                rec = model(ids).argmax(-1)
                acc = (rec == ids).float().mean().item()  # HERE
    return s, acc


def test_a_reconstruction_accuracy_over_trailing_padding_is_a_warning():
    s, _ = reconstruction_counts_padding()
    found = metric_findings(s)
    assert [(f.severity.value, f.line) for f in found] == [("warning", here(reconstruction_counts_padding))]
    assert found[0].evidence["ignored_by"] == "padding_idx 0"


def correct_metrics():
    torch.manual_seed(0)
    model = Tagger()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    cls_head = nn.Linear(16, 3)
    with watch(model, opt) as s:
        for ids in batches():
            labels = ids % 3  # a tag per token
            labels[ids == PAD] = -100
            logits = model(ids)
            loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
            keep = labels != -100
            acc1 = ((logits.argmax(-1) == labels) & keep).sum() / keep.sum()
            acc2 = (logits.argmax(-1) == labels)[keep].float().mean()
            acc3 = (logits.argmax(-1)[keep] == labels[keep]).float().mean()
            acc4 = ((logits.argmax(-1) == labels).float() * keep).sum() / keep.sum()
            acc5 = (logits.argmax(-1) == labels).sum() / (labels != -100).sum()  # a match is never -100
            correct = (logits.argmax(-1) == labels).sum().item()  # the denominator counted in Python
            total = int(keep.sum())
            opt.zero_grad()
            loss.backward()
            opt.step()
            (acc1 + acc2 + acc3 + acc4 + acc5).item() + correct / total
        with torch.no_grad():  # sequence classification: class 0 is a class, not padding
            ids = batches(n=1, seed=5)[0]
            y = torch.arange(8) % 3
            y[0] = 0
            pooled = model.rnn(model.emb(ids))[0].mean(1)
            (cls_head(pooled).argmax(1) == y).float().mean().item()
            out = model(ids)
            ((out.argmax(-1) == ids % 3) & (ids != PAD)).sum().item()
    return s


def test_metrics_that_exclude_the_ignored_positions_stay_quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("error", torchtriage.TriageInternalWarning)
        s = correct_metrics()
    assert metric_findings(s) == []
    assert alarms(s) == []
