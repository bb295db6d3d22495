"""A loader over the whole dataset a split was cut from, iterated once after training to
embed or predict every sample (`features = [enc(x) for x, _ in all_loader]`): the training part
is in it by design, it is not the held-out set (`data.split_overlap` stays quiet). The same
loader named as the test set, or scored every epoch, is an evaluation on trained rows."""

from __future__ import annotations

import textwrap

from test_ledger import run_script

PROGRAM = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

torch.manual_seed(0)
x = torch.randn(240, 12)
y = (x[:, :3].sum(1) > 0).long()
dataset = TensorDataset(x, y)
part_a, part_b = random_split(dataset, [180, 60])
fit_loader = DataLoader(part_a, batch_size=30, shuffle=True)
score_loader = DataLoader(part_b, batch_size=30)
{second} = DataLoader(dataset, batch_size=40)  # HERE
enc = nn.Sequential(nn.Linear(12, 16), nn.ReLU())
head = nn.Linear(16, 2)
model = nn.Sequential(enc, head)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    model.train()
    for xb, yb in fit_loader:
        opt.zero_grad(); F.cross_entropy(model(xb), yb).backward(); opt.step()
    model.eval()
    with torch.no_grad():
        hits = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in score_loader)
{every_epoch}
model.eval()
with torch.no_grad():
{after}
"""

EMBED = "    codes = torch.cat([enc(xb) for xb, _ in {name}])\n"
SCORE = "    acc = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in {name})\n"


def _run(tmp_path, tag, name, after, every_epoch=""):
    src = textwrap.dedent(PROGRAM).format(second=name, after=after.format(name=name),
                                          every_epoch=every_epoch.format(name=name))
    report, _ = run_script(f"full_pass_{tag}.py", tmp_path, checks=("data_ledger",), source=src)
    line = next(i for i, s in enumerate(src.splitlines(), 1) if "# HERE" in s)
    return [f for f in report.filter(code="data.split_overlap") if f.severity.value != "info"], line


def test_embedding_every_sample_once_after_training_is_quiet(tmp_path):
    found, _ = _run(tmp_path, "embed", "all_loader", EMBED)
    assert found == [], [(f.code, f.message) for f in found]


def test_predictions_for_the_whole_table_once_are_quiet(tmp_path):
    found, _ = _run(tmp_path, "predict", "full_loader", SCORE)
    assert found == [], [(f.code, f.message) for f in found]


def test_the_whole_dataset_named_as_the_test_set_is_an_overlap(tmp_path):
    found, line = _run(tmp_path, "named", "test_loader", SCORE)
    assert len(found) == 1 and found[0].line == line, [(f.code, f.line, f.message) for f in found]
    assert found[0].evidence["matched"] == "index"


def test_the_whole_dataset_scored_every_epoch_is_an_overlap(tmp_path):
    every = ("    with torch.no_grad():\n"
             "        acc = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in {name})\n")
    found, line = _run(tmp_path, "epochs", "full_loader", SCORE, every_epoch=every)
    assert len(found) == 1 and found[0].line == line, [(f.code, f.line, f.message) for f in found]
