"""Overlapping windows across splits (issue 25, `_ledger/_windows.py`): samples cut from one series
with a sliding window, then split at random. Every validation window shares most of its time steps
with training windows; split first, then cut windows, and nothing is shared."""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script


def _run(tmp_path, source):
    return run_script("prog.py", tmp_path, checks=("data_ledger",), source=textwrap.dedent(source))


_line = line_in


def _overlaps(report):
    return [f for f in report.findings if f.code == "data.split_overlap"]


SERIES = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset, random_split

rng = np.random.default_rng(0)
series = np.cumsum(rng.normal(size=(1200, 5)), axis=0).astype(np.float32)   # 5 sensors over time
LOOK = 8

class Windows(Dataset):
    def __init__(self, data):
        self.data = data
    def __len__(self):
        return len(self.data) - LOOK
    def __getitem__(self, i):
        x = torch.from_numpy(self.data[i:i + LOOK]%s)     # the last LOOK steps
        return x, torch.from_numpy(self.data[i + LOOK])

torch.manual_seed(0)
%s
train_loader = DataLoader(train_ds, batch_size=64, shuffle=True)
val_loader = DataLoader(val_ds, batch_size=256)  # HERE
model = nn.Sequential(nn.Flatten(), nn.Linear(LOOK * 5, 32), nn.ReLU(), nn.Linear(32, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(3):
    model.train()
    for x, y in train_loader:
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    model.eval()
    with torch.no_grad():
        print(epoch, sum(F.mse_loss(model(x), y).item() for x, y in val_loader))
"""

RANDOM_SPLIT = """ds = Windows(series)
train_ds, val_ds = random_split(ds, [len(ds) - 200, 200], generator=torch.Generator().manual_seed(0))"""
TIME_SPLIT = """cut = 1000
train_ds, val_ds = Windows(series[:cut]), Windows(series[cut:])   # split first, then windows"""


def test_windows_of_one_series_split_at_random_overlap_along_time(tmp_path):
    source = SERIES % ("", RANDOM_SPLIT)  # samples (LOOK steps, 5 sensors): time is axis 1
    report, _ = _run(tmp_path, source)
    [f] = _overlaps(report)
    assert (f.severity.value, f.line, f.evidence["matched"], f.evidence["axis"]) == \
        ("error", _line(source), "overlapping windows", 1)
    assert f.evidence["evaluation_samples"] == 200 and f.evidence["count"] >= 190
    assert f.evidence["training_loader"] == "train_loader" and f.evidence["positions"] == 8


def test_windows_laid_out_sensors_first_overlap_along_the_last_axis(tmp_path):
    source = SERIES % (".T.copy()", RANDOM_SPLIT)  # samples (5 sensors, LOOK steps): time is axis 2
    report, _ = _run(tmp_path, source)
    [f] = _overlaps(report)
    assert (f.severity.value, f.evidence["axis"], f.evidence["count"] >= 190) == ("error", 2, True)


def test_a_series_split_in_time_before_windowing_is_quiet(tmp_path):
    report, _ = _run(tmp_path, SERIES % ("", TIME_SPLIT))
    assert _overlaps(report) == []


BORDER_SPLIT = """cut = 1000
train_ds, val_ds = Windows(series[:cut]), Windows(series[cut - LOOK:])   # val inputs start inside train"""


def test_a_time_split_whose_validation_lookback_reaches_into_training_is_quiet(tmp_path):
    # Informer-style borders: the first validation windows take their inputs from the end of the
    # training stretch (context, not leaked targets); a minority of the windows, at one border.
    report, _ = _run(tmp_path, SERIES % ("", BORDER_SPLIT))
    assert _overlaps(report) == []


IID_SEQUENCES = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

torch.manual_seed(0)
# one-hot sequences over 4 symbols: every step's vector is one of 4, shared by chance everywhere
X = F.one_hot(torch.randint(0, 4, (600, 10)), 4).float()
y = (X[:, :, 0].sum(1) > 2.5).long()
train_ds, val_ds = random_split(TensorDataset(X, y), [500, 100], generator=torch.Generator().manual_seed(0))
train_loader = DataLoader(train_ds, batch_size=50, shuffle=True)
val_loader = DataLoader(val_ds, batch_size=100)
model = nn.Sequential(nn.Flatten(), nn.Linear(40, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    for x, t in train_loader:
        loss = F.cross_entropy(model(x), t)
        opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad():
        print(sum((model(x).argmax(1) == t).sum().item() for x, t in val_loader))
"""


def test_independent_sequences_of_a_small_alphabet_are_quiet(tmp_path):
    # Their steps repeat by chance (4 one-hot vectors): as often between validation samples at
    # unrelated places as between validation and training, so no overlap is claimed.
    report, _ = _run(tmp_path, IID_SEQUENCES)
    assert _overlaps(report) == []


UNLOADED = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

class Windows(Dataset):
    def __init__(self, period, window=12):
        rng = np.random.default_rng(0)
        series = np.cumsum(rng.normal(size=(900, 4)), axis=0).astype(np.float32)
        x = np.stack([series[i:i + window] for i in range(len(series) - window + 1)])
        ids = %s
        cut = int(0.9 * len(x))
        self.samples = x[ids[:cut]] if period == "train" else x[ids[cut:]]
    def __len__(self):
        return len(self.samples)
    def __getitem__(self, i):
        return torch.from_numpy(self.samples[i])

def main():
    torch.manual_seed(0)
    train_set = Windows("train")
    test_set = Windows("test")  # HERE
    loader = DataLoader(train_set, batch_size=64, shuffle=True)
    model = nn.Sequential(nn.Flatten(), nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, 48))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        for x in loader:
            loss = F.mse_loss(model(x), x.flatten(1))
            opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad():   # scored by hand on the dataset's array, not through a loader
        x = torch.from_numpy(test_set.samples)
        print(F.mse_loss(model(x), x.flatten(1)).item())

main()
"""


def test_a_held_out_dataset_scored_by_hand_shares_windows_with_training(tmp_path):
    source = UNLOADED % "np.random.default_rng(1).permutation(len(x))"
    report, _ = _run(tmp_path, source)
    [f] = _overlaps(report)
    assert (f.severity.value, f.line, f.evidence["matched"], f.evidence["axis"]) == \
        ("error", _line(source), "overlapping windows", 1)
    assert (f.evidence["evaluation_loader"], f.evidence["training_loader"]) == ("test_set", "loader")
    assert f.evidence["evaluation_samples"] == 89 and f.evidence["count"] >= 85
    assert f.evidence["iterated_by_a_loader"] is False
    assert "of held-out dataset 'test_set'" in f.message and "which no DataLoader iterates" in f.message


def test_a_held_out_dataset_split_in_time_is_quiet(tmp_path):
    report, _ = _run(tmp_path, UNLOADED % "np.arange(len(x))")
    assert _overlaps(report) == []


KFOLD_WINDOWS = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from sklearn.model_selection import KFold

rng = np.random.default_rng(0)
# 12 recordings of 40 s: per second a (4 channels x 3 bands) feature map, one signature per recording
feats = (rng.normal(size=(12, 1, 4, 3)) + 0.3 * rng.normal(size=(12, 40, 4, 3))).astype(np.float32)
label = np.arange(12) %% 2
win, step = 6, 2
idx = [(r, s) for s in range(0, 40 - win + 1, step) for r in range(12)]
data = torch.tensor(np.stack([feats[r, s:s + win] for r, s in idx]))    # (windows, 6 s, 4, 3)
labels = torch.tensor([label[r] for r, s in idx])
recording = np.array([r for r, s in idx])

def train(model, x, y):
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(3):
        for i in range(0, len(x), 32):
            loss = F.cross_entropy(model(x[i:i + 32]), y[i:i + 32])
            opt.zero_grad(); loss.backward(); opt.step()

def validate(model, val_data, val_labels):
    model.eval()
    with torch.no_grad():
        return (model(val_data).argmax(1) == val_labels).float().mean().item()  # HERE

%s
for fold, (train_idx, val_idx) in enumerate(folds):
    torch.manual_seed(fold)
    model = nn.Sequential(nn.Flatten(), nn.Linear(6 * 4 * 3, 16), nn.ReLU(), nn.Linear(16, 2))
    train(model, data[train_idx], labels[train_idx])
    print(fold, validate(model, data[val_idx], labels[val_idx]))
"""

WINDOW_FOLDS = "folds = KFold(5, shuffle=True, random_state=0).split(np.arange(len(data)))   # over windows"
RECORDING_FOLDS = """folds = [(np.flatnonzero(~np.isin(recording, te)), np.flatnonzero(np.isin(recording, te)))
         for _, te in KFold(4, shuffle=True, random_state=0).split(np.arange(12))]   # over recordings"""


def test_a_kfold_over_overlapping_windows_fed_by_hand_shares_their_steps(tmp_path):
    # Feature maps per second (rank 3 samples): windows of 6 s every 2 s, folds drawn over the
    # windows: each validation window's seconds are in its training neighbours'.
    source = KFOLD_WINDOWS % WINDOW_FOLDS
    report, _ = _run(tmp_path, source)
    [f] = _overlaps(report)
    assert (f.severity.value, f.line, f.evidence["matched"], f.evidence["axis"]) == \
        ("error", _line(source), "overlapping windows", 1)
    assert f.evidence["positions"] == 6 and f.evidence["count"] >= f.evidence["evaluation_samples"] // 2


def test_a_kfold_over_recordings_is_quiet(tmp_path):
    report, _ = _run(tmp_path, KFOLD_WINDOWS % RECORDING_FOLDS)
    assert _overlaps(report) == []


IMAGES = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

torch.manual_seed(0)
X = torch.rand(600, 3, 8, 8)                     # distinct RGB images (rank 3 samples)
X[:, :, :2] = 0                                  # a black border, shared by every image
y = (X[:, 0].mean((1, 2)) > 0.37).long()
train_ds, val_ds = random_split(TensorDataset(X, y), [500, 100], generator=torch.Generator().manual_seed(0))
train_loader = DataLoader(train_ds, batch_size=50, shuffle=True)
val_loader = DataLoader(val_ds, batch_size=100)
model = nn.Sequential(nn.Flatten(), nn.Linear(192, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(2):
    for x, t in train_loader:
        loss = F.cross_entropy(model(x), t)
        opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad():
        print(sum((model(x).argmax(1) == t).sum().item() for x, t in val_loader))
"""


def test_distinct_images_split_at_random_are_quiet(tmp_path):
    # Rank 3 samples are digested along their first axis (channels here): distinct images share
    # no channel plane, so nothing overlaps.
    report, _ = _run(tmp_path, IMAGES)
    assert _overlaps(report) == []
