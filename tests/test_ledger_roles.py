"""Where every held-out sample goes (session 12): every held-out row evaluated in each pass
(`data.eval_lost`, the same rows left out of every pass), a split's rows in one role
(`data.heldout_unloaded`), near-copies on one side (`data.split_overlap`, runs of slices).
Programs written the way users write them, in several styles; the bugs assert the exact finding,
the look-alikes assert silence."""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script


def _run(tmp_path, source):
    # (one file name per program: the user's source is read once per file name)
    name = next(k for k, v in globals().items() if v is source).lower() + ".py"
    return run_script(name, tmp_path, checks=("data_ledger",), source=textwrap.dedent(source))


_line = line_in


def _data(report):
    return [f for f in report.findings if f.code.startswith("data.") and f.severity.value != "info"]


# ---------------------------------------------------------------- the same rows left out of every pass
CONFIG_BUILDER = """
import dataclasses
import torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

@dataclasses.dataclass
class LoaderConfig:
    start: int
    n: int
    batch_size: int
    def build(self, train):
        t = (self.start + torch.arange(self.n, dtype=torch.float32)[:, None]) / 400
        ds = TensorDataset(torch.cat([t, torch.sin(6 * t)], 1), torch.cos(6 * t))
        return DataLoader(ds, batch_size=self.batch_size, shuffle=train,
                          drop_last=True)  # HERE

torch.manual_seed(0)
train_loader, valid_loader = LoaderConfig(0, 300, 32).build(True), LoaderConfig(300, 90, 32).build(False)
net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
for epoch in range(3):
    for x, y in train_loader:
        opt.zero_grad(); nn.functional.mse_loss(net(x), y).backward(); opt.step()
    with torch.no_grad():
        err = [nn.functional.mse_loss(net(x), y).item() for x, y in valid_loader]
"""

FUNCTION_TRAINER = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset

def make_loaders(ds, cut):
    train = DataLoader(Subset(ds, range(cut)), batch_size=50, shuffle=True)
    test = DataLoader(Subset(ds, range(cut, len(ds))), batch_size=50, drop_last=True)  # HERE
    return train, test

def fit(model, loader, opt):
    model.train()
    for xb, yb in loader:
        opt.zero_grad(); F.cross_entropy(model(xb), yb).backward(); opt.step()

def score(model, loader):
    model.eval()
    with torch.no_grad():
        return sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in loader)

torch.manual_seed(0)
ds = TensorDataset(torch.randn(620, 10), torch.randint(0, 4, (620,)))
train, test = make_loaders(ds, 500)
model = nn.Linear(10, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    fit(model, train, opt)
    print(score(model, test))
"""


def test_the_same_tail_left_out_of_every_evaluation_pass(tmp_path):
    for source, n, lost, rows in ((CONFIG_BUILDER, 90, 26, [64, 89]), (FUNCTION_TRAINER, 120, 20, [600, 619])):
        report, _ = _run(tmp_path, source)
        [f] = _data(report)
        assert (f.code, f.severity.value, f.line) == ("data.eval_lost", "warning", _line(source))
        ev = f.evidence
        assert (ev["samples"], ev["lost"], ev["never_evaluated"], ev["never_evaluated_rows"]) == (n, lost, lost, rows)
        assert ev["same_samples_every_pass"] is True
        assert f"leaves the same {lost} of its {n} samples" in f.message


DROP_LAST_LOOKALIKES = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset, random_split

torch.manual_seed(0)
ds = TensorDataset(torch.randn(700, 6), torch.randint(0, 3, (700,)))
train_set, val_set = random_split(ds, [610, 90], generator=torch.Generator().manual_seed(0))
train_loader = DataLoader(train_set, batch_size=32, shuffle=True, drop_last=True)   # training: fine
val_loader = DataLoader(val_set, batch_size=32)                                     # all rows
shuffled_val = DataLoader(val_set, batch_size=32, shuffle=True, drop_last=True)     # a new remainder each pass
probe = DataLoader(Subset(train_set, range(64)), batch_size=32)                     # a fixed train subsample
model = nn.Linear(6, 3)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    for xb, yb in train_loader:
        opt.zero_grad(); F.cross_entropy(model(xb), yb).backward(); opt.step()
    with torch.no_grad():
        for loader in (val_loader, shuffled_val, probe):
            acc = sum((model(xb).argmax(1) == yb).float().sum() for xb, yb in loader)
"""


def test_drop_last_on_training_a_shuffled_remainder_and_a_probe_are_quiet(tmp_path):
    report, _ = _run(tmp_path, DROP_LAST_LOOKALIKES)
    assert _data(report) == []


# ---------------------------------------------------------------- the held-out loader given the training rows
SAMPLER_SWAP_TWO_OPTIMIZERS = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset

class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(12, 5)
        self.alpha = nn.Parameter(torch.zeros(5))
    def forward(self, x):
        return self.body(x) * torch.sigmoid(self.alpha)

torch.manual_seed(0)
data = TensorDataset(torch.randn(400, 12), torch.randint(0, 5, (400,)))
idx = torch.randperm(400).tolist()
w_sampler, a_sampler = SubsetRandomSampler(idx[:320]), SubsetRandomSampler(idx[320:])
w_loader = DataLoader(data, batch_size=40, sampler=w_sampler)
a_loader = DataLoader(data, batch_size=40,
                      sampler=w_sampler)  # HERE
model = Gated()
w_opt = torch.optim.SGD(model.body.parameters(), lr=0.1)
a_opt = torch.optim.Adam([model.alpha], lr=1e-2)
for epoch in range(3):
    for (xw, yw), (xa, ya) in zip(w_loader, a_loader):
        w_opt.zero_grad(); F.cross_entropy(model(xw), yw).backward(); w_opt.step()
        a_opt.zero_grad(); F.cross_entropy(model(xa), ya).backward(); a_opt.step()
"""

VAL_NAMED_TRAIN_INDICES = """
import numpy as np, torch, torch.nn as nn
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset

class Trainer:
    def __init__(self, ds):
        order = np.random.default_rng(0).permutation(len(ds))
        self.train_idx, self.val_idx = order[:240].tolist(), order[240:].tolist()
        self.train_loader = DataLoader(ds, batch_size=24, sampler=SubsetRandomSampler(self.train_idx))
        self.val_loader = DataLoader(ds, batch_size=24,
                                     sampler=SubsetRandomSampler(self.train_idx))  # HERE
        self.model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-2)

    def run(self, epochs):
        for _ in range(epochs):
            self.model.train()
            for x, y in self.train_loader:
                self.opt.zero_grad(); nn.functional.mse_loss(self.model(x), y).backward(); self.opt.step()
            self.model.eval()
            with torch.no_grad():
                val = sum(nn.functional.mse_loss(self.model(x), y).item() for x, y in self.val_loader)

torch.manual_seed(0)
Trainer(TensorDataset(torch.randn(300, 8), torch.randn(300, 1))).run(2)
"""


def test_a_held_out_loader_given_the_training_rows(tmp_path):
    report, _ = _run(tmp_path, SAMPLER_SWAP_TWO_OPTIMIZERS)
    [f] = _data(report)
    assert (f.code, f.severity.value, f.line) == ("data.heldout_unloaded", "error", _line(SAMPLER_SWAP_TWO_OPTIMIZERS))
    ev = f.evidence
    assert (ev["loader"], ev["training_loader"], ev["rows_delivered"], ev["never_loaded"], ev["dataset_rows"]) == \
        ("a_loader", "w_loader", 320, 80, 400)
    assert (ev["held_out_by"], ev["unused_sampler"], ev["loader_trains"]) == ("unused sampler", "a_sampler", True)
    assert "trains on the same 320 rows that 'w_loader' trains on" in f.message

    report, _ = _run(tmp_path, VAL_NAMED_TRAIN_INDICES)
    [f] = _data(report)
    assert (f.code, f.severity.value, f.line) == ("data.heldout_unloaded", "error", _line(VAL_NAMED_TRAIN_INDICES))
    ev = f.evidence
    assert (ev["loader"], ev["rows_delivered"], ev["never_loaded"], ev["held_out_by"], ev["loader_trains"]) == \
        ("self.val_loader", 240, 60, "name", False)
    assert "evaluates the same 240 rows" in f.message


SAME_ROWS_LOOKALIKES = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(300, 6), torch.randint(0, 3, (300,)))
idx = torch.randperm(300).tolist()
train_sampler, valid_sampler = SubsetRandomSampler(idx[:240]), SubsetRandomSampler(idx[240:])
pretrain_loader = DataLoader(data, batch_size=30, sampler=train_sampler)
finetune_loader = DataLoader(data, batch_size=30, sampler=train_sampler)   # same rows, another optimizer
valid_loader = DataLoader(data, batch_size=30, sampler=valid_sampler)
train_eval = DataLoader(data, batch_size=30, sampler=train_sampler)        # training accuracy, on purpose
enc, head = nn.Linear(6, 6), nn.Linear(6, 3)
opt1 = torch.optim.SGD(enc.parameters(), lr=0.1)
opt2 = torch.optim.Adam(head.parameters(), lr=1e-2)
for xb, yb in pretrain_loader:
    opt1.zero_grad(); F.cross_entropy(head(enc(xb)), yb).backward(); opt1.step()
for epoch in range(2):
    for xb, yb in finetune_loader:
        opt2.zero_grad(); F.cross_entropy(head(enc(xb)), yb).backward(); opt2.step()
    with torch.no_grad():
        for loader in (valid_loader, train_eval):
            acc = sum((head(enc(xb)).argmax(1) == yb).sum() for xb, yb in loader)
"""


def test_pretraining_and_fine_tuning_on_the_training_rows_is_quiet(tmp_path):
    report, _ = _run(tmp_path, SAME_ROWS_LOOKALIKES)
    assert _data(report) == []


# ---------------------------------------------------------------- context windows of one item on both sides
CROPS_SPLIT_BY_ROW = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, random_split

torch.manual_seed(0)
vocab = torch.randn(3000, 16)                      # one vector per word
docs = [torch.randint(0, 3000, (14,)) for _ in range(120)]
labels = torch.randint(0, 3, (120,))

class Crops(Dataset):                              # every document as 4 crops with other context words
    def __init__(self):
        self.items = []
        for d, y in zip(docs, labels):
            for k in range(4):
                left = torch.randint(0, 3000, (k,))
                right = torch.randint(0, 3000, (6 - k,))
                self.items.append((vocab[torch.cat([left, d, right])], y))
    def __len__(self):
        return len(self.items)
    def __getitem__(self, i):
        return self.items[i]

train_set, val_set = random_split(Crops(), [400, 80],  # HERE
                                  generator=torch.Generator().manual_seed(0))
train_loader = DataLoader(train_set, batch_size=40, shuffle=True)
val_loader = DataLoader(val_set, batch_size=40)
model = nn.Sequential(nn.Flatten(), nn.Linear(20 * 16, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    for x, y in train_loader:
        opt.zero_grad(); F.cross_entropy(model(x), y).backward(); opt.step()
    with torch.no_grad():
        acc = sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader)
"""


def test_context_windows_of_one_item_split_by_row(tmp_path):
    report, _ = _run(tmp_path, CROPS_SPLIT_BY_ROW)
    [f] = _data(report)
    assert (f.code, f.severity.value) == ("data.split_overlap", "error")
    ev = f.evidence
    assert (ev["matched"], ev["consecutive_slices"], ev["evaluation_samples"]) == ("overlapping windows", 4, 80)
    assert ev["count"] >= 70


CROPS_SPLIT_BY_ITEM = CROPS_SPLIT_BY_ROW.replace(
    "train_set, val_set = random_split(Crops(), [400, 80],  # HERE\n"
    "                                  generator=torch.Generator().manual_seed(0))",
    "ds = Crops()\n"
    "train_set, val_set = torch.utils.data.Subset(ds, range(400)), torch.utils.data.Subset(ds, range(400, 480))")

SMALL_ALPHABET = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
codebook = torch.randn(6, 8)                       # independent sequences over a small alphabet
x = codebook[torch.randint(0, 6, (600, 24))]
y = torch.randint(0, 2, (600,))
train_loader = DataLoader(TensorDataset(x[:500], y[:500]), batch_size=50, shuffle=True)
val_loader = DataLoader(TensorDataset(x[500:], y[500:]), batch_size=50)
model = nn.Sequential(nn.Flatten(), nn.Linear(24 * 8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for xb, yb in train_loader:
        opt.zero_grad(); F.cross_entropy(model(xb), yb).backward(); opt.step()
    with torch.no_grad():
        acc = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val_loader)
"""


def test_items_kept_whole_and_a_small_alphabet_are_quiet(tmp_path):
    assert "Subset(ds, range(400, 480))" in CROPS_SPLIT_BY_ITEM
    for source in (CROPS_SPLIT_BY_ITEM, SMALL_ALPHABET):
        report, _ = _run(tmp_path, source)
        assert _data(report) == [], [f.message for f in _data(report)]


SAMPLERS_IN_A_FUNCTION = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset

def get_loaders(data, portion):
    split = int(portion * len(data))
    first, second = SubsetRandomSampler(list(range(split))), SubsetRandomSampler(list(range(split, len(data))))
    weights = DataLoader(data, batch_size=32, sampler=first)
    arch = DataLoader(data, batch_size=32, sampler=first)  # HERE
    return weights, arch

torch.manual_seed(0)
weights, arch = get_loaders(TensorDataset(torch.randn(320, 6), torch.randint(0, 2, (320,))), 0.75)
body, gate = nn.Linear(6, 2), nn.Parameter(torch.zeros(2))
o1, o2 = torch.optim.SGD(body.parameters(), lr=0.1), torch.optim.Adam([gate], lr=1e-2)
for epoch in range(2):
    for x, y in weights:
        o1.zero_grad(); F.cross_entropy(body(x) + gate, y).backward(); o1.step()
    for x, y in arch:
        o2.zero_grad(); F.cross_entropy(body(x) + gate, y).backward(); o2.step()
"""


def test_the_held_out_sampler_built_in_a_function_and_never_used(tmp_path):
    report, _ = _run(tmp_path, SAMPLERS_IN_A_FUNCTION)
    [f] = _data(report)
    assert (f.code, f.severity.value, f.line) == ("data.heldout_unloaded", "error", _line(SAMPLERS_IN_A_FUNCTION))
    ev = f.evidence
    assert (ev["loader"], ev["training_loader"], ev["rows_delivered"], ev["never_loaded"]) == \
        ("arch", "weights", 240, 80)
    assert (ev["held_out_by"], ev["unused_sampler"], ev["unused_sampler_rows"]) == ("unused sampler", "second", 80)
