"""Held-out samples never reach an optimizer step (issue 25, session 11): through the gradients an
evaluation pass leaves in `.grad` (`_ledger/_heldgrads.py`), through a full-batch regression loss
over nodes a held-out mask selects (`_ledger/_heldlabels.py`), and through a model evaluated on
validation rows it was trained on (`_ledger/_handfed.py`, an evaluation named by its calling lines)."""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script


def _run(tmp_path, source, checks=("data_ledger",)):
    return run_script("prog.py", tmp_path, checks=checks, source=textwrap.dedent(source))


_line = line_in


def _held(report):
    return [f for f in report.findings if f.code == "data.heldout_trained"]


# ------------------------------------------------ an evaluation pass's gradients applied by training

LOSS_HELPER = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long())

class LossCompute:
    def __init__(self, opt=None):
        self.opt = opt
    def __call__(self, out, y):
        loss = F.cross_entropy(out, y)
%s
        return loss.item()

train_loader = DataLoader(data(256, 1), batch_size=32, shuffle=True)
val_loader = DataLoader(data(96, 2), batch_size=32)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(4):
    model.train()
    for x, y in train_loader:
        LossCompute(opt)(model(x), y)
    model.eval()
    for x, y in val_loader:
        LossCompute(None)(model(x), y)
"""

BUG = """\
        loss.backward()  # HERE
        if self.opt is not None:
            self.opt.step()
            self.opt.zero_grad()"""

FIXED = """\
        if self.opt is not None:
            loss.backward()
            self.opt.step()
            self.opt.zero_grad()"""

ZERO_FIRST = """\
        if self.opt is not None:
            self.opt.zero_grad()
        loss.backward()
        if self.opt is not None:
            self.opt.step()"""


def test_validation_gradients_applied_by_the_next_training_step(tmp_path):
    source = LOSS_HELPER % BUG
    report, _ = _run(tmp_path, source)
    [f] = _held(report)
    assert (f.severity.value, f.line) == ("error", _line(source))
    ev = f.evidence
    assert ev["loader"] == "val_loader"
    # 4 validation passes of 3 batches; the last pass's gradients are never applied (the run ends)
    assert (ev["evaluation_passes"], ev["backwards_in_those_passes"], ev["optimizer_steps_applying_them"]) == \
        (3, 9, 3)
    assert ev["first_steps"] == [8, 16, 24]
    assert "the evaluation pass over val_loader ran backward 9 time(s) and never stepped" in f.message


def test_no_backward_in_evaluation_or_a_reset_before_training_is_quiet(tmp_path):
    for body in (FIXED, ZERO_FIRST):
        report, _ = _run(tmp_path, LOSS_HELPER % body)
        assert _held(report) == [], body


def test_gradients_reset_by_hand_are_quiet(tmp_path):
    # saliency over the validation batches, then `p.grad = None` by hand before training resumes
    source = (LOSS_HELPER % BUG).replace(
        "    for x, y in val_loader:\n        LossCompute(None)(model(x), y)\n",
        "    for x, y in val_loader:\n        LossCompute(None)(model(x), y)\n"
        "    for p in model.parameters():\n        p.grad = None\n")
    report, _ = _run(tmp_path, source)
    assert _held(report) == []


TTA = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(256, 8); y = (x[:, 0] > 0).long()
train_loader = DataLoader(TensorDataset(x[:192], y[:192]), batch_size=32, shuffle=True)
test_loader = DataLoader(TensorDataset(x[192:], y[192:]), batch_size=32)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(3):
    model.train()
    for xb, yb in train_loader:
        opt.zero_grad(); F.cross_entropy(model(xb), yb).backward(); opt.step()
# test-time adaptation: entropy minimization on the test inputs, stepped inside the pass
model.eval()
for xb, _ in test_loader:
    p = model(xb).softmax(1)
    (-(p * p.clamp_min(1e-8).log()).sum(1).mean()).backward()
    opt.step(); opt.zero_grad()
"""


def test_test_time_adaptation_that_steps_in_its_own_pass_is_quiet(tmp_path):
    report, _ = _run(tmp_path, TTA)
    assert _held(report) == []


FROZEN_BN = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(200, 8); y = (x[:, 0] > 0).long()
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
model.eval()  # fine-tuning with frozen batch-norm statistics
for epoch in range(3):
    for i, (xb, yb) in enumerate(loader):
        F.cross_entropy(model(xb), yb).backward()
        if i % 3 == 2:  # gradient accumulation: the epoch's remainder carries into the next one
            opt.step(); opt.zero_grad()
"""


def test_accumulation_carried_across_epochs_of_one_loader_is_quiet(tmp_path):
    report, _ = _run(tmp_path, FROZEN_BN)
    assert _held(report) == []


# ------------------------------------------------ a regression loss over every node of a graph

GRAPH = """
import torch, torch.nn as nn

class Data:
    def __init__(self, **kw):
        self.__dict__.update(kw)

torch.manual_seed(0)
n = 200
x = torch.randn(n, 12)
data = Data(x=x, y=x[:, :3] @ torch.randn(3, 4) + 0.1 * torch.randn(n, 4))
perm = torch.randperm(n)
for name, part in (("train_mask", perm[:120]), ("val_mask", perm[120:160]), ("test_mask", perm[160:])):
    m = torch.zeros(n, dtype=torch.bool); m[part] = True; setattr(data, name, m)
model = nn.Linear(12, 4)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
loss_fn = nn.MSELoss()

def training_step(batch):
    out = model(batch.x)
%s

for epoch in range(30):
    opt.zero_grad()
    loss = training_step(data)
    loss.backward()
    opt.step()
"""


def test_a_regression_loss_over_every_node_trains_the_held_out_nodes(tmp_path):
    source = GRAPH % "    return loss_fn(out, batch.y)  # HERE"
    report, _ = _run(tmp_path, source)
    [f] = _held(report)
    assert (f.severity.value, f.line) == ("error", _line(source))
    ev = f.evidence
    assert (ev["held_out"], ev["held_out_rows"], ev["rows_per_call"]) == ("batch.test_mask, batch.val_mask", 80, 200)
    assert (ev["loss_calls"], ev["backpropagated"], ev["optimizer_steps"]) == (30, 30, 30)


def test_regression_losses_over_the_training_nodes_or_the_inputs_are_quiet(tmp_path):
    for body in ("    m = batch.train_mask\n    return loss_fn(out[m], batch.y[m])",
                 # an autoencoder over the node features: its target is the model's input
                 "    return loss_fn(nn.functional.linear(out, torch.ones(12, 4)), batch.x)"):
        report, _ = _run(tmp_path, GRAPH % body)
        assert _held(report) == [], body


# ------------------------------------------------ validation rows appended to the shared training set

SHARED = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F

rng = np.random.RandomState(0)
X = rng.normal(size=(300, 10)).astype(np.float32)
Y = (X[:, :3].sum(1) + rng.normal(0, 0.5, 300)).astype(np.float32)
split = {"train": list(range(0, 180)), "validation": list(range(180, 220)), "test": list(range(220, 300))}

def fit(rows, width):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, width), nn.ReLU(), nn.Linear(width, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.from_numpy(X[rows]), torch.from_numpy(Y[rows])
    for _ in range(20):
        perm = torch.randperm(len(rows))
        for i in range(0, len(rows), 32):
            idx = perm[i:i + 32]
            loss = F.mse_loss(model(x[idx]).squeeze(1), y[idx])
            opt.zero_grad(); loss.backward(); opt.step()
    return model

def predict(model, rows):
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(X[rows])).squeeze(1).numpy()  # HERE

for name in ("small", "wide"):
    train_rows = %s
    val_rows = split["validation"]
    scores = {}
    for width in (8, 64):
        validation_pred = predict(fit(train_rows, width), val_rows)
        scores[width] = float(np.sqrt(((validation_pred - Y[val_rows]) ** 2).mean()))
    best = min(scores, key=scores.get)
    train_rows += val_rows  # the final fit on train + validation
    test_pred = predict(fit(train_rows, best), split["test"])
"""


def test_a_model_evaluated_once_on_validation_rows_it_trained_on(tmp_path):
    source = SHARED % 'split["train"]'  # the split's own list: `+=` grows it for the next model
    report, _ = _run(tmp_path, source)
    [f] = [f for f in report.findings if f.code == "data.split_overlap"]
    assert (f.severity.value, f.line) == ("error", _line(source))
    assert (f.evidence["count"], f.evidence["evaluation_samples"], f.evidence["matched"]) == (40, 40, "content")


def test_copies_of_the_split_and_a_final_fit_on_train_and_validation_are_quiet(tmp_path):
    report, _ = _run(tmp_path, SHARED % 'list(split["train"])')
    assert [f for f in report.findings if f.code == "data.split_overlap"] == []
