"""Splits made before `watch()`: taken up at their loaders' first batch (`_adopt.py`), so a loop
wrapped after its data was split is checked like one whose split the session saw; the split's
line is read from the source. Correct loops stay quiet: a part equal to a known part is that
part, and any other Subset (a slice of the training part for a quick evaluation, a split of a
part) is left alone."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset, random_split

import torchtriage
from _lines import line_in

HERE = Path(__file__)


def _line(marker: str) -> int:
    return line_in(HERE, marker, ending=True)


def _fit(model, opt, train_loader, eval_loaders, epochs=2):
    for _ in range(epochs):
        model.train()
        for xb, yb in train_loader:
            loss = F.mse_loss(model(xb).squeeze(1), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            for loader in eval_loaders:
                for xb, _ in loader:
                    model(xb)


def _data(n, seed=0):
    torch.manual_seed(seed)
    X = torch.randn(n, 3)
    return TensorDataset(X, X.sum(1))


def test_a_split_made_before_watch_is_taken_up_and_training_on_its_held_out_part_found():
    dataset = _data(60)
    train_set, val_set = random_split(dataset, [42, 18])  # SPLIT-A
    train_loader = DataLoader(dataset, batch_size=12, shuffle=True)  # the bug: the whole dataset
    val_loader = DataLoader(val_set, batch_size=18)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        _fit(model, opt, train_loader, [val_loader])
    (f,) = [f for f in s.report.findings if f.category.value == "data"]
    assert (f.code, f.severity.value, f.file, f.line) == ("data.heldout_trained", "error", str(HERE),
                                                         _line("# SPLIT-A"))
    assert f.evidence["count"] == f.evidence["held_out_rows"] == 18
    assert f.evidence["example_index"] in val_set.indices


def test_splits_made_before_watch_and_used_correctly_are_quiet():
    dataset = _data(80)
    train_set, val_set, test_set = random_split(dataset, [50, 20, 10])  # SPLIT-B
    quick = Subset(train_set, range(8))  # a slice of the training part, evaluated to watch overfitting
    inner_train, inner_val = random_split(train_set, [40, 10])  # a split of a part: left alone
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        _fit(model, opt, DataLoader(train_set, batch_size=10, shuffle=True),
             [DataLoader(val_set, batch_size=10), DataLoader(quick, batch_size=8),
              DataLoader(inner_val, batch_size=10), DataLoader(test_set, batch_size=10)])
    assert [f.code for f in s.report.findings if f.category.value == "data"] == []


def test_kfold_subsets_made_in_advance_one_session_per_fold_are_quiet():
    dataset = _data(40)
    order = torch.randperm(40, generator=torch.Generator().manual_seed(1)).tolist()
    folds = [order[i::4] for i in range(4)]
    pairs = [(Subset(dataset, [j for f in folds[:k] + folds[k + 1:] for j in f]), Subset(dataset, folds[k]))
             for k in range(4)]
    for train_part, val_part in pairs:
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
            _fit(model, opt, DataLoader(train_part, batch_size=10), [DataLoader(val_part, batch_size=10)], epochs=1)
        assert [f.code for f in s.report.findings if f.category.value == "data"] == []


class Noisy(torch.utils.data.Dataset):
    """Rows augmented on load (noise added at each access): batches never equal the stored
    rows, so they are matched to splits by the loader's indices only."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 3, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        x = self.x[i] + 0.01 * torch.randn(3)
        return x, x.sum()


def test_a_concat_dataset_is_followed_part_by_part():
    """The training part concatenated with extra rows (the usual ConcatDataset), and by mistake
    the validation part too: the validation rows it trains on are found by index; the extra
    rows, in no split, are nothing to it. Without the validation part, the same loop is quiet."""
    from torch.utils.data import ConcatDataset

    for leak in (True, False):
        dataset, extra = Noisy(60, seed=0), Noisy(15, seed=1)
        train_set, val_set = random_split(dataset, [45, 15])  # SPLIT-C
        parts = [train_set, extra, val_set] if leak else [train_set, extra]
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
            _fit(model, opt, DataLoader(ConcatDataset(parts), batch_size=15, shuffle=True),
                 [DataLoader(val_set, batch_size=15)], epochs=3)
        # (Noisy augments on every load, the evaluation loader too: `data.eval_inputs_random` is
        # true of this program and tested in test_encoding_workers.py; the split is the question here)
        found = [(f.code, f.line, f.evidence.get("count")) for f in s.report.findings
                 if f.category.value == "data" and f.code != "data.eval_inputs_random"]
        assert found == ([("data.heldout_trained", _line("# SPLIT-C"), 15)] if leak else []), found
