"""Normalisation statistics that know the held-out rows (session 11, `_ledger/_scaling.py`): a
series or a table standardized with the mean and std of all its rows, then split, so that the
union of the loaders is standardized and the training rows are not. The right way (statistics of
the training rows applied to every split), per-sample normalization and fixed constants are quiet."""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script


def _run(tmp_path, source):
    return run_script("prog.py", tmp_path, checks=("data_ledger",), source=textwrap.dedent(source))


_line = line_in


def _scaled(report):
    return [f for f in report.findings if f.code == "data.preprocessing_fit_on_all"]


# A traffic-like series whose level grows over time; windows of 8 steps; the last 40 % of the
# steps are validation and test. %s normalizes it.
SERIES = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

rng = np.random.RandomState(0)
t = np.arange(1000)[:, None]
data = (200 + rng.uniform(0, 100, (1, 6)) + 60 * np.sin(2 * np.pi * t / 288) + 0.12 * t
        + rng.normal(0, 10, (1000, 6))).astype(np.float32)

def windows(part, lag=8):
    x = np.stack([part[i:i + lag] for i in range(len(part) - lag - 1)])
    y = np.stack([part[i + lag] for i in range(len(part) - lag - 1)])
    return torch.from_numpy(x), torch.from_numpy(y)

def loader(part, shuffle):
    return DataLoader(TensorDataset(*windows(part)), batch_size=64, shuffle=shuffle)  # HERE

%s
train_loader = loader(train, True)
val_loader = loader(val, False)
test_loader = loader(test, False)
torch.manual_seed(0)
model = nn.Sequential(nn.Flatten(), nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, 6))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(2):
    model.train()
    for x, y in train_loader:
        loss = F.l1_loss(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    model.eval()
    with torch.no_grad():
        print(sum(F.l1_loss(model(x), y).item() for x, y in val_loader))
        print(sum(F.l1_loss(model(x), y).item() for x, y in test_loader))
"""

FIT_ON_ALL = """mean, std = data.mean(), data.std()
data = (data - mean) / std                      # statistics of all 1000 steps
train, val, test = data[:600], data[600:800], data[800:]"""

FIT_ON_TRAIN = """train, val, test = data[:600], data[600:800], data[800:]
mean, std = train.mean(), train.std()            # statistics of the training steps only
train, val, test = (train - mean) / std, (val - mean) / std, (test - mean) / std"""

PER_COLUMN_ON_ALL = """mean, std = data.mean(0), data.std(0)     # per sensor, over all steps
data = (data - mean) / std
train, val, test = data[:600], data[600:800], data[800:]"""

PER_SAMPLE = """train, val, test = data[:600], data[600:800], data[800:]
def norm(part):                                  # every step scaled by its own statistics
    return (part - part.mean(1, keepdims=True)) / part.std(1, keepdims=True)
train, val, test = norm(train), norm(val), norm(test)"""

CONSTANTS = """train, val, test = data[:600], data[600:800], data[800:]
train, val, test = (train - 250.0) / 60.0, (val - 250.0) / 60.0, (test - 250.0) / 60.0"""


def test_a_series_standardized_before_the_split_is_an_error_with_the_rows(tmp_path):
    source = SERIES % FIT_ON_ALL
    report, _ = _run(tmp_path, source)
    [f] = _scaled(report)
    assert (f.severity.value, f.line) == ("error", _line(source))
    ev = f.evidence
    assert (ev["training_loader"], ev["evaluation_loaders"], ev["standardized"]) == \
        ("train_loader", ["val_loader", "test_loader"], "all cells")
    # each step once: 591 windows of 8 steps with a stride of 1 hold 598 training steps; 198 + 198 held out
    assert (ev["train_rows"], ev["held_out_rows"], ev["rows"]) == (598, 396, 994)
    assert abs(ev["pool_mean"]) < 0.02 and abs(ev["pool_std"] - 1) < 0.02
    assert ev["train_mean"] < -0.3 and ev["train_mean"] < -ev["random_split_max_deviation"]
    assert "statistics" in f.message and "held-out" in f.message


def test_per_column_statistics_over_all_steps_are_found_per_column(tmp_path):
    report, _ = _run(tmp_path, SERIES % PER_COLUMN_ON_ALL)
    [f] = _scaled(report)
    assert (f.evidence["standardized"], f.severity.value) == ("per column", "error")


def test_statistics_of_the_training_steps_applied_to_every_split_are_quiet(tmp_path):
    report, _ = _run(tmp_path, SERIES % FIT_ON_TRAIN)
    assert _scaled(report) == []


def test_per_sample_normalization_and_fixed_constants_are_quiet(tmp_path):
    for how in (PER_SAMPLE, CONSTANTS):
        report, _ = _run(tmp_path, SERIES % how)
        assert _scaled(report) == [], how


RANDOM_SPLIT = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(2000, 10) * 3 + 5
y = (X[:, 0] > 5).long()
X = (X - X.mean(0)) / X.std(0)                   # all rows, then a random split: harmless
perm = torch.randperm(2000)
tr, va = perm[:1600], perm[1600:]
train_loader = DataLoader(TensorDataset(X[tr], y[tr]), batch_size=64, shuffle=True)
val_loader = DataLoader(TensorDataset(X[va], y[va]), batch_size=256)
model = nn.Linear(10, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, t in train_loader:
    loss = F.cross_entropy(model(x), t)
    opt.zero_grad(); loss.backward(); opt.step()
model.eval()
with torch.no_grad():
    print(sum((model(x).argmax(1) == t).sum().item() for x, t in val_loader))
"""


def test_a_random_split_of_rows_standardized_together_is_quiet(tmp_path):
    # The training part's mean stays within chance of the pool's: the leak moved nothing measurable.
    report, _ = _run(tmp_path, RANDOM_SPLIT)
    assert _scaled(report) == []


SUBSET_TIME = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, Subset

rng = np.random.RandomState(0)
t = np.arange(1200)[:, None]
X = (0.01 * t + rng.normal(0, 1, (1200, 4))).astype(np.float32)
y = X.sum(1)
X = (X - X.mean(0)) / X.std(0)                   # all rows, then the first 900 train
ds = TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
train_loader = DataLoader(Subset(ds, range(0, 900)), batch_size=64, shuffle=True)
val_loader = DataLoader(Subset(ds, range(900, 1200)), batch_size=300)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for e in range(2):
    model.train()
    for x, t_ in train_loader:
        loss = F.mse_loss(model(x)[:, 0], t_)
        opt.zero_grad(); loss.backward(); opt.step()
    model.eval()
    with torch.no_grad():
        print(sum(F.mse_loss(model(x)[:, 0], t_).item() for x, t_ in val_loader))
"""


def test_subsets_of_one_standardized_table_split_in_time_are_found_once(tmp_path):
    # The ledger alone: per column, the 900 training rows against the 1,200 pooled ones.
    report, _ = _run(tmp_path, SUBSET_TIME)
    [f] = _scaled(report)
    ev = f.evidence
    assert (ev["standardized"], ev["rows"], ev["train_rows"], ev["held_out_rows"]) == ("per column", 1200, 900, 300)
    # With the `leakage` check too (it sees the Subsets as a split): one finding, not two.
    report, _ = run_script("prog.py", tmp_path, checks=("data_ledger", "leakage"), source=textwrap.dedent(SUBSET_TIME))
    assert len(_scaled(report)) == 1


# Clips of several lengths, normalized on access with a mean vector the dataset stores; the
# held-out clips (new subjects) move more. %s computes that mean.
CLIPS = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

rng = np.random.default_rng(0)
basis = rng.normal(0, 1, (4, 12))
drift = rng.normal(0, 0.6, 12)                   # how new subjects' poses differ, per feature
clips = {}
for split, n, style in (("train", 120, 1.0), ("val", 30, 1.8), ("test", 40, 1.8)):
    clips[split] = [(style * rng.normal(0, 1, (int(rng.integers(30, 50)), 4)) @ basis + (style - 1) * drift
                     + 0.05 * rng.normal(0, 1, (1, 12))).astype(np.float32) for _ in range(n)]

%s

class Clips(Dataset):
    def __init__(self, split, mean, std):
        self.mean, self.std = mean, std
        self.data = clips[split]
    def __len__(self):
        return len(self.data)
    def __getitem__(self, i):
        return (self.data[i][:24] - self.mean) / self.std

train_loader = DataLoader(Clips("train", mean, std), batch_size=20, shuffle=True)  # HERE
test_loader = DataLoader(Clips("test", mean, std), batch_size=40)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(12, 6), nn.Tanh(), nn.Linear(6, 12))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    model.train()
    for x in train_loader:
        loss = F.mse_loss(model(x), x)
        opt.zero_grad(); loss.backward(); opt.step()
    model.eval()
    with torch.no_grad():
        print(sum(F.mse_loss(model(x), x).item() for x in test_loader))
"""

ALL_CLIPS = """frames = np.concatenate(clips["train"] + clips["val"] + clips["test"])   # every clip
mean, std = frames.mean(0), frames.std(0)"""
TRAIN_CLIPS = """frames = np.concatenate(clips["train"])                                 # the training clips
mean, std = frames.mean(0), frames.std(0)"""
FIXED = """mean, std = np.full(12, 0.25, dtype=np.float32), np.full(12, 2.0, dtype=np.float32)   # constants"""


def test_a_stored_mean_over_all_clips_is_the_training_mean_moved_toward_the_held_out(tmp_path):
    source = CLIPS % ALL_CLIPS
    report, _ = _run(tmp_path, source)
    [f] = _scaled(report)
    assert (f.severity.value, f.line, f.evidence["statistic"]) == ("error", _line(source), "mean")
    ev = f.evidence
    train_rows = ev["train_rows"]
    assert ev["features"] == 12 and ev["evaluation_loader"] == "test_loader"
    # the held-out clips' share of the frames the mean was computed on (val and test alike)
    assert 0.2 < ev["held_out_weight"] < 0.5 and ev["fit_r2"] > 0.9 and ev["max_shift_in_train_std"] > 0.1
    assert 3600 <= train_rows <= 6000


def test_a_stored_mean_of_the_training_clips_or_constants_is_quiet(tmp_path):
    for how in (TRAIN_CLIPS, FIXED):
        report, _ = _run(tmp_path, CLIPS % how)
        assert _scaled(report) == [], how


def test_constants_beside_held_out_rows_shifted_alike_in_every_feature_are_quiet(tmp_path):
    # A constant mean vector lines up with a shift that is the same in every feature; the held-out
    # share must also hold feature by feature.
    source = (CLIPS % FIXED).replace("drift = rng.normal(0, 0.6, 12)", "drift = np.full(12, 0.5)")
    report, _ = _run(tmp_path, source)
    assert _scaled(report) == []
