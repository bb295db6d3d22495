"""Session 14 (leak): rows standardized over all rows before their split are reported at the line
that took the statistics (`_leakage/_runtime/_statsline.py`), with the split in the message and
`statistics_at`; a scaler fitted on the training part only stays quiet. Programs written as users
write them, run under a discovering session."""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script
from torchtriage._leakage._runtime._statsline import statistics_line


def _run(tmp_path, source):
    return run_script("prog.py", tmp_path, checks=("leakage",), source=textwrap.dedent(source))


def _line(source: str, tag: str = "# HERE") -> int:
    return line_in(source, tag, ending=True)


def _prep(report):
    return [f for f in report.findings if f.code == "data.preprocessing_fit_on_all"]


# (1) a plain script: numpy statistics with axis=0, a train_test_split
PLAIN_NUMPY = """
    import numpy as np
    import torch
    import torch.nn as nn
    from sklearn.model_selection import train_test_split

    rng = np.random.RandomState(0)
    X = rng.randn(400, 5) * [1.0, 4.0, 0.2, 9.0, 1.0] + [0.0, 10.0, -3.0, 40.0, 1.0]
    y = (X[:, 0] > 0).astype(np.int64)
    mu = np.mean(X, axis=0)  # STATS
    sd = X.std(axis=0)
    X = (X - mu) / sd
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=0)  # SPLIT
    Xtr, ytr = torch.tensor(Xtr, dtype=torch.float32), torch.tensor(ytr)
    model = nn.Linear(5, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        loss = nn.functional.cross_entropy(model(Xtr), ytr)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""

# (2) a function-based pipeline: torch.std_mean over dim 0 inside the function that splits
FUNCTIONAL = """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, TensorDataset, random_split

    def make_loaders(X, y):
        std, mean = torch.std_mean(X, dim=0)  # STATS
        X = (X - mean) / std
        train, val = random_split(TensorDataset(X, y), [160, 40], generator=torch.Generator().manual_seed(1))  # SPLIT
        return DataLoader(train, batch_size=32, shuffle=True), DataLoader(val, batch_size=64)

    def fit(model, loader):
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for xb, yb in loader:
            loss = nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()

    torch.manual_seed(0)
    X = torch.randn(200, 4) * 3 + 7
    y = X.sum(1, keepdim=True)
    train_loader, val_loader = make_loaders(X, y)
    fit(nn.Linear(4, 1), train_loader)
"""

# (3) a class pipeline: keepdim statistics as attributes, a randperm split
CLASS = """
    import torch
    import torch.nn as nn

    class Pipeline:
        def __init__(self, X, y):
            self.mean = X.mean(dim=0, keepdim=True)  # STATS
            self.std = X.std(dim=0, keepdim=True)
            X = (X - self.mean) / self.std
            perm = torch.randperm(len(X))
            self.train = X[perm[:240]], y[perm[:240]]  # SPLIT
            self.test = X[perm[240:]], y[perm[240:]]

        def run(self, model):
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            xb, yb = self.train
            for _ in range(10):
                loss = nn.functional.mse_loss(model(xb), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()

    torch.manual_seed(0)
    X = torch.randn(300, 6) * 5 - 2
    Pipeline(X, X[:, :1] * 2).run(nn.Linear(6, 1))
"""


def test_numpy_statistics_before_train_test_split(tmp_path):
    report, _ = _run(tmp_path, PLAIN_NUMPY)
    [f] = _prep(report)
    stats, split = _line(PLAIN_NUMPY, "# STATS"), _line(PLAIN_NUMPY, "# SPLIT")
    assert (f.severity.value, f.line) == ("info", stats)
    assert f.evidence["statistics_at"].endswith(f"prog.py:{stats}") and f.evidence["split"].endswith(f"prog.py:{split}")
    assert (f.evidence["rows"], f.evidence["train_rows"], f.evidence["columns"]) == (400, 320, 5)
    assert f.message.startswith("the 400 rows split at ") and f"prog.py:{split} (train_test_split)" in f.message


def test_std_mean_inside_the_splitting_function(tmp_path):
    report, _ = _run(tmp_path, FUNCTIONAL)
    [f] = _prep(report)
    assert (f.severity.value, f.line) == ("info", _line(FUNCTIONAL, "# STATS"))
    assert (f.evidence["rows"], f.evidence["train_rows"]) == (200, 160)


def test_keepdim_statistics_in_a_class_before_a_randperm_split(tmp_path):
    report, _ = _run(tmp_path, CLASS)
    [f] = _prep(report)
    assert (f.severity.value, f.line) == ("info", _line(CLASS, "# STATS"))
    assert (f.evidence["rows"], f.evidence["train_rows"]) == (300, 240)


def test_statistics_of_the_training_part_only_are_quiet(tmp_path):
    fixed = FUNCTIONAL.replace(
        "        std, mean = torch.std_mean(X, dim=0)  # STATS\n        X = (X - mean) / std\n"
        "        train, val = random_split(",
        "        train, val = random_split(").replace(
        "        return DataLoader(train",
        "        std, mean = torch.std_mean(X[train.indices], dim=0)\n"
        "        X.sub_(mean).div_(std)\n"
        "        return DataLoader(train")
    assert "X[train.indices]" in fixed
    report, _ = _run(tmp_path, fixed)
    assert not _prep(report)


def test_no_line_when_the_statistics_are_taken_elsewhere(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def load(X):\n    return (X - X.mean(0)) / X.std(0)\n\n"
                   "def main(X):\n    X = load(X)\n    tr = X[:10]\n    m = X.mean(1)\n")
    assert statistics_line(str(src), 6) is None  # mean(1) is over columns; load() is another function
    assert statistics_line(str(src), 3) is None
