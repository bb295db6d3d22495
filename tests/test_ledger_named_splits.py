"""Evaluation data named held-out that is the training data (issue 25, `_ledger/_verdicts.py`).

A validation dataset built with the training data's constructor (``MNIST(train=True)`` twice)
holds exactly the training samples in a second dataset object: the loader named for validation
measures training accuracy and hides overfitting. A train-accuracy loader (named after the
training data, or unnamed) over the same samples measures them on purpose and stays quiet."""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script


def _run(tmp_path, source, checks=("data_ledger",)):
    return run_script("prog.py", tmp_path, checks=checks, source=textwrap.dedent(source))


_line = line_in


def _overlaps(report):
    return [f for f in report.findings if f.code == "data.split_overlap"]


VAL_FROM_TRAIN = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

def dataset(train=True):
    rng = np.random.RandomState(1 if train else 2)
    n = 320 if train else 128
    y = rng.randint(0, 10, n)
    x = (rng.normal(0, 1, (n, 16)) + y[:, None]).astype(np.float32)
    return TensorDataset(torch.from_numpy(x), torch.from_numpy(y).long())

torch.manual_seed(0)
train_dataset = dataset(train=True)
val_dataset = dataset(train=%s)
train_dl = DataLoader(train_dataset, batch_size=64, shuffle=True)
%s = DataLoader(val_dataset, batch_size=64, shuffle=False)  # HERE
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(3):
    model.train()
    for x, y in train_dl:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    model.eval()
    with torch.no_grad():
        acc = sum((model(x).argmax(1) == y).sum().item() for x, y in %s)
"""


def test_a_validation_dataset_built_from_the_training_data_is_an_error(tmp_path):
    source = VAL_FROM_TRAIN % ("True", "val_dl", "val_dl")
    report, _ = _run(tmp_path, source)
    [f] = _overlaps(report)
    assert (f.severity.value, f.line, f.evidence["matched"], f.evidence["role"]) == \
        ("error", _line(source), "content", "validation")
    assert (f.evidence["count"], f.evidence["evaluation_samples"]) == (320, 320)
    assert (f.evidence["evaluation_loader"], f.evidence["training_loader"]) == ("val_dl", "train_dl")
    assert "named for evaluation, evaluates on exactly the 320 samples" in f.message
    assert "train=True" in f.cause


def test_the_held_out_split_is_quiet(tmp_path):  # the fixed twin: train=False
    report, _ = _run(tmp_path, VAL_FROM_TRAIN % ("False", "val_dl", "val_dl"))
    assert _overlaps(report) == []


def test_train_accuracy_over_a_copy_of_the_training_data_is_quiet(tmp_path):
    report, _ = _run(tmp_path, VAL_FROM_TRAIN % ("True", "train_eval_dl", "train_eval_dl"))
    assert _overlaps(report) == []
    report, _ = _run(tmp_path, VAL_FROM_TRAIN % ("True", "measure_dl", "measure_dl"))
    assert _overlaps(report) == []


# ------------------------------------------------------- held-out labels in a trained loss

EVAL_LOOP = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(192, 8); y = (x[:, 0] > 0).long()
train_loader = DataLoader(TensorDataset(x[:128], y[:128]), batch_size=32, shuffle=True)
test_loader = DataLoader(TensorDataset(x[128:], y[128:]), batch_size=32)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for epoch in range(3):
    model.train()
    for xb, yb in train_loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
model.eval()
for epoch in range(2):
%s
"""

TRAINS_ON_TEST = """    for xb, yb in test_loader:  # HERE
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()"""
NO_GRAD = """    for xb, yb in test_loader:
        with torch.no_grad():
            loss = F.cross_entropy(model(xb), yb)"""
GRAD_ON_NO_STEP = """    for xb, yb in test_loader:
        loss = F.cross_entropy(model(xb), yb)
        print(loss.item())"""
ENTROPY = """    model.train()
    for xb, _ in test_loader:   # test-time adaptation: entropy of the predictions, no labels
        p = model(xb).softmax(1)
        loss = -(p * p.clamp_min(1e-8).log()).sum(1).mean()
        optimizer.zero_grad(); loss.backward(); optimizer.step()"""
PSEUDO = """    model.train()
    for xb, _ in test_loader:   # pseudo-labels from the model's own predictions
        out = model(xb)
        loss = F.cross_entropy(out, out.argmax(1).detach())
        optimizer.zero_grad(); loss.backward(); optimizer.step()"""


def _held(report):
    return [f for f in report.findings if f.code == "data.heldout_trained"]


def test_an_evaluation_loop_that_steps_on_test_labels_is_an_error(tmp_path):
    source = EVAL_LOOP % TRAINS_ON_TEST
    report, _ = _run(tmp_path, source)
    [f] = _held(report)
    assert (f.severity.value, f.line, f.category) == ("error", _line(source), "data")
    ev = f.evidence
    assert (ev["held_out"], ev["backpropagated"], ev["optimizer_steps"], ev["rows_per_call"]) == \
        ("test_loader", 4, 4, 32)
    assert ev["loss_at"].endswith(f"prog.py:{_line(source) + 2}")
    assert f.message.startswith("the loop over held-out data test_loader trains the model")
    assert "followed by 4 optimizer step(s)" in f.message


def test_a_test_batch_object_whose_label_field_feeds_the_loss(tmp_path):
    source = """
import torch, torch.nn as nn, torch.nn.functional as F

class Graph:
    def __init__(self, x, graph_y):
        self.x, self.graph_y = x, graph_y

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
    def forward(self, data):
        return self.lin(data.x)

torch.manual_seed(0)
train_graphs = [Graph(torch.randn(16, 4), torch.randint(0, 3, (16,))) for _ in range(6)]
test_graphs = [Graph(torch.randn(16, 4), torch.randint(0, 3, (16,))) for _ in range(3)]
model = Net(); optimizer = torch.optim.Adam(model.parameters(), lr=0.01); criterion = nn.CrossEntropyLoss()
for data in train_graphs:
    optimizer.zero_grad(); criterion(model(data), data.graph_y).backward(); optimizer.step()
model.eval()
for data in test_graphs:  # HERE
    optimizer.zero_grad()
    loss = criterion(model(data), data.graph_y)
    loss.backward()
    optimizer.step()
"""
    report, _ = _run(tmp_path, source)
    [f] = _held(report)
    assert (f.severity.value, f.line, f.evidence["held_out"], f.evidence["optimizer_steps"]) == \
        ("error", _line(source), "test_graphs", 3)


TEMPERATURE = """    temperature = torch.nn.Parameter(torch.ones(1))   # calibration: fitted on validation labels
    t_opt = torch.optim.SGD([temperature], lr=0.01)
    for xb, yb in test_loader:
        with torch.no_grad():
            logits = model(xb)
        loss = F.cross_entropy(logits / temperature, yb)
        t_opt.zero_grad(); loss.backward(); t_opt.step()"""
PHASES = """    loaders = {"train": train_loader, "val": test_loader}
    for phase in ("train", "val"):
        model.train(phase == "train")
        for xb, yb in loaders[phase]:
            with torch.set_grad_enabled(phase == "train"):
                loss = F.cross_entropy(model(xb), yb)
            if phase == "train":
                optimizer.zero_grad(); loss.backward(); optimizer.step()"""


def test_evaluation_loops_that_update_nothing_or_use_no_labels_are_quiet(tmp_path):
    for body in (NO_GRAD, GRAD_ON_NO_STEP, ENTROPY, PSEUDO, TEMPERATURE, PHASES):
        report, _ = _run(tmp_path, EVAL_LOOP % body)
        assert _held(report) == [], body


FULL_GRAPH = """
import torch, torch.nn as nn, torch.nn.functional as F

class Planetoid:
    def __init__(self, n):
        self.x = torch.randn(n, 6); self.y = (self.x[:, 0] > 0).long()
        perm = torch.randperm(n)
        self.train_mask = torch.zeros(n, dtype=torch.bool); self.train_mask[perm[:n // 2]] = True
        self.test_mask = ~self.train_mask

torch.manual_seed(0)
data = Planetoid(200)
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
for epoch in range(5):
    out = model(data.x)
%s
    opt.zero_grad(); loss.backward(); opt.step()
with torch.no_grad():
    acc = (model(data.x).argmax(1) == data.y)[data.test_mask].float().mean()
"""


def test_a_full_graph_loss_over_the_test_nodes_is_an_error(tmp_path):
    source = FULL_GRAPH % "    loss = F.cross_entropy(out, data.y)  # HERE"
    report, _ = _run(tmp_path, source)
    [f] = _held(report)
    assert (f.severity.value, f.line, f.evidence["held_out"]) == ("error", _line(source), "data.test_mask")
    assert (f.evidence["held_out_rows"], f.evidence["rows_per_call"], f.evidence["optimizer_steps"]) == (100, 200, 5)
    assert "including the 100 rows that data.test_mask holds out" in f.message


def test_a_held_out_index_list_in_the_frame(tmp_path):
    source = FULL_GRAPH.replace("with torch.no_grad():", "def fit(test_idx):\n    pass\nwith torch.no_grad():") % (
        "    test_idx = torch.arange(150, 200)\n    loss = F.cross_entropy(out, data.y)  # HERE")
    report, _ = _run(tmp_path, source)
    [f] = _held(report)
    # every held-out selection in the frame counts: the index list and the graph's own test mask (session 11)
    assert (f.line, f.evidence["held_out"], f.evidence["held_out_rows"]) == \
        (_line(source), "test_idx, data.test_mask", 135)


def test_full_graph_losses_that_keep_the_test_nodes_out_are_quiet(tmp_path):
    for body in ("    loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])",
                 "    per_node = F.cross_entropy(out, data.y, reduction='none')\n"
                 "    loss = (per_node * data.train_mask).sum() / data.train_mask.sum()",
                 "    y = data.y.clone(); y[data.test_mask] = -100\n    loss = F.cross_entropy(out, y)"):
        report, _ = _run(tmp_path, FULL_GRAPH % body)
        assert _held(report) == [], body


# ------------------------------------------- a split redrawn by hand, rows fed one at a time

RESPLIT = """
import numpy as np, torch, torch.nn as nn

rng = np.random.default_rng(0)
data = np.concatenate([c + 0.3 * rng.standard_normal((50, 4)) for c in ([5, 3, 1, 0], [6, 3, 4, 1], [7, 3, 6, 2])])
target = np.repeat(np.arange(3), 50)

def split(seed):
    idx = np.random.default_rng(seed).permutation(len(data))
    te, tr = idx[:60], idx[60:]
    return (torch.FloatTensor(data[tr]), torch.LongTensor(target[tr]),
            torch.FloatTensor(data[te]), torch.LongTensor(target[te]))

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
%s
score = 0
for x, y in zip(test_data, test_label):  # HERE
    score += int(model(x).detach().argmax() == y)   # gradients on, train() mode: nothing steps
print(score)
"""
EACH_EPOCH = """for epoch in range(6):
    train_data, train_label, _, _ = split(epoch)      # a new split every epoch
    for x, y in zip(train_data, train_label):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
_, _, test_data, test_label = split(99)"""
ONCE = """train_data, train_label, test_data, test_label = split(0)
for epoch in range(6):
    for x, y in zip(train_data, train_label):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()"""


def test_test_rows_fed_one_at_a_time_after_a_split_redrawn_each_epoch(tmp_path):
    source = RESPLIT % EACH_EPOCH
    report, _ = _run(tmp_path, source)
    [f] = _overlaps(report)
    assert (f.severity.value, f.line, f.evidence["matched"]) == ("error", _line(source), "content")
    assert f.evidence["evaluation_samples"] == 60 and f.evidence["count"] >= 55


def test_a_split_made_once_with_rows_fed_one_at_a_time_is_quiet(tmp_path):
    report, _ = _run(tmp_path, RESPLIT % ONCE)
    assert _overlaps(report) == [] and _held(report) == []
    # train accuracy measured row by row on the training rows, gradients on: quiet too
    source = (RESPLIT % ONCE).replace("zip(test_data, test_label)", "zip(train_data, train_label)")
    report, _ = _run(tmp_path, source)
    assert _overlaps(report) == []
