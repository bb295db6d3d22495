"""An evaluation named for a test or a validation that reads the training loader
(`data.split_overlap`, key `eval_on_train`, session 16, `_ledger/_evalnames.py`): the "test" accuracy
of a helper handed `train_loader`, and a manual iterator over the training loader inside an
`evaluate()` that takes k batches; quiet when the result is named for training, when the held-out
loader is the one evaluated, and when the program built no held-out loader. Also
`data.eval_inputs_random` for a validation split drawn from the training dataset through a sampler
of the user's that replays one index list (the training transform's draws in every pass)."""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script


def _run(tmp_path, source, checks=("data_ledger",)):
    return run_script("prog.py", tmp_path, checks=checks, source=textwrap.dedent(source))


_line = line_in


def _found(report, key="eval_on_train"):
    return [f for f in report.findings if f.code == "data.split_overlap" and f.evidence.get("named_as")]


HELPER = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(192, 12); y = (x[:, 0] + x[:, 1] > 0).long()
xt = torch.randn(96, 12); yt = (xt[:, 0] + xt[:, 1] > 0).long()
train_loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
test_loader = DataLoader(TensorDataset(xt, yt), batch_size=32)
net = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.Adam(net.parameters(), lr=1e-2)

def accuracy(loader):
    net.eval()
    hits = total = 0
    with torch.no_grad():
        for xb, yb in loader:
            hits += (net(xb).argmax(1) == yb).sum().item()
            total += len(yb)
    net.train()
    return hits / total

history = []
for epoch in range(4):
    for xb, yb in train_loader:
        loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad(); loss.backward(); opt.step()
    %s
    history.append(acc)
"""


def test_a_test_accuracy_measured_on_the_train_loader_warns(tmp_path):
    source = HELPER % "test_acc = accuracy(train_loader); acc = test_acc  # HERE"
    report, _ = _run(tmp_path, source)
    [f] = _found(report)
    assert (f.severity.value, f.line) == ("warning", _line(source))
    assert f.evidence["named_as"] == "test" and f.evidence["samples_evaluated"] == 192
    assert "test_loader" in f.evidence["held_out_loader"]


def test_train_accuracy_and_the_held_out_accuracy_are_quiet(tmp_path):
    source = HELPER % "train_acc = accuracy(train_loader); val_acc = accuracy(test_loader); acc = (train_acc, val_acc)"
    report, _ = _run(tmp_path, source)
    assert not [f for f in report.findings if f.code == "data.split_overlap"]


def test_no_held_out_loader_built_is_quiet(tmp_path):
    source = (HELPER % "test_acc = accuracy(train_loader); acc = test_acc").replace(
        "test_loader = DataLoader(TensorDataset(xt, yt), batch_size=32)", "")
    report, _ = _run(tmp_path, source)
    assert not _found(report)


ITERATOR = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

class Trainer:
    def __init__(self, model, train_dl, valid_dl):
        self.model, self.train_dl, self.valid_dl = model, train_dl, valid_dl
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
        self.best = float("inf")

    def fit(self, epochs):
        for epoch in range(epochs):
            for xb, yb in self.train_dl:
                loss = F.mse_loss(self.model(xb), yb)
                self.opt.zero_grad(); loss.backward(); self.opt.step()
            score = self.validate()
            self.best = min(self.best, score)

    def validate(self):
        total, k = 0.0, len(self.valid_dl.dataset) // self.train_dl.batch_size
        valid_iter = iter(self.train_dl)  # HERE
        for _ in range(k):
            xb, yb = next(valid_iter)
            total += F.mse_loss(self.model(xb), yb).item()
        return total / k

torch.manual_seed(0)
w = torch.randn(8, 1)
x = torch.randn(160, 8); y = x @ w + 0.3 * torch.randn(160, 1)
xv = torch.randn(64, 8); yv = xv @ w
model = nn.Linear(8, 1)
Trainer(model, DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True),
        DataLoader(TensorDataset(xv, yv), batch_size=16)).fit(5)
"""


def test_a_validation_iterator_over_the_train_loader_warns(tmp_path):
    """No `valid_dl = DataLoader(...)` line: the held-out loader is made inside a call; its
    iterator is never asked for. The evaluation runs with gradients on, in train mode."""
    source = ITERATOR
    report, _ = _run(tmp_path, source)
    [f] = _found(report)
    assert (f.severity.value, f.line, f.evidence["named_as"]) == ("warning", _line(source), "validation")


def test_the_validation_iterator_over_the_held_out_loader_is_quiet(tmp_path):
    source = ITERATOR.replace("valid_iter = iter(self.train_dl)", "valid_iter = iter(self.valid_dl)")
    report, _ = _run(tmp_path, source)
    assert not [f for f in report.findings if f.code == "data.split_overlap"]


REPLAY = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Sampler, SubsetRandomSampler

class Jitter:
    def __call__(self, x):
        return x + 0.5 * torch.randn_like(x)

class Plain:
    def __call__(self, x):
        return x

class Points(Dataset):
    def __init__(self, n, transform):
        g = torch.Generator().manual_seed(3)
        self.x = torch.randn(n, 10, generator=g)
        self.y = (self.x.sum(1) > 0).long()
        self.transform = transform
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        return self.transform(self.x[i]), self.y[i]

class InOrder(Sampler):
    def __init__(self, indices):
        self.indices = indices
    def __iter__(self):
        return iter(self.indices)
    def __len__(self):
        return len(self.indices)

torch.manual_seed(0)
data = Points(240, %s())
perm = torch.randperm(240).tolist()
train_idx, valid_idx = perm[:180], perm[180:]
train_dl = DataLoader(data, batch_size=30, sampler=SubsetRandomSampler(train_idx))
valid_dl = DataLoader(data, batch_size=30, sampler=InOrder(valid_idx))  # HERE
model = nn.Linear(10, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    model.train()
    for x, y in train_dl:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    model.eval()
    with torch.no_grad():
        val_loss = sum(F.cross_entropy(model(x), y).item() for x, y in valid_dl)
"""


def test_a_validation_split_through_a_replaying_sampler_of_the_users_gets_the_training_draws(tmp_path):
    """The sampler is the user's class, but it replays one index list: its passes are comparable."""
    source = REPLAY % "Jitter"
    report, _ = _run(tmp_path, source)
    [f] = [f for f in report.findings if f.code == "data.eval_inputs_random"]
    assert (f.severity.value, f.line) == ("warning", _line(source))
    assert f.evidence["dataset_shared_with_training"] is True


def test_a_replaying_sampler_over_a_fixed_transform_is_quiet(tmp_path):
    report, _ = _run(tmp_path, REPLAY % "Plain")
    assert not [f for f in report.findings if f.code == "data.eval_inputs_random"]
