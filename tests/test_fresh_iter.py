"""A fresh iterator every step (`data.coverage_lost`, key `fresh_iter`, `_ledger/_fresh.py`):
`next(iter(loader))` in the step loop keeps the first batch of a new pass each step."""

from __future__ import annotations

from test_ledger import here, run_script


def _fresh(report):
    return [f for f in report.findings if f.code == "data.coverage_lost"]


def test_next_iter_each_step_over_a_shuffled_loader_draws_with_replacement(tmp_path):
    report, _ = run_script("bug_fresh_iter_each_step.py", tmp_path)
    [f] = _fresh(report)
    assert (f.severity.value, f.line) == ("warning", here("bug_fresh_iter_each_step.py"))
    ev = f.evidence
    assert (ev["loader"], ev["passes_of_one_batch"], ev["batches_per_full_pass"]) == ("train_loader", 48, 16)
    assert ev["samples_per_full_pass"] == 512 and ev["windows"] == 3 and ev["shuffled"] is True
    assert 0.5 < ev["distinct_share"] < 0.75  # about 1 - 1/e of what a full pass covers
    assert f.message.startswith("loader 'train_loader' is given a fresh iterator at line ")
    assert "with replacement" in f.cause and "iter(loader)" in f.next_check


def test_an_iterator_rebuilt_in_a_while_loop_over_a_sequential_loader_trains_one_batch(tmp_path):
    report, _ = run_script("bug_fresh_iter_sequential.py", tmp_path)
    [f] = _fresh(report)
    assert (f.severity.value, f.line) == ("warning", here("bug_fresh_iter_sequential.py"))
    ev = f.evidence
    assert ev["distinct_per_window"][0] == 20 and ev["drawn_per_window"][0] == 300 and ev["shuffled"] is False
    assert "same first batch" in f.cause


def test_iterators_made_once_cycled_renewed_or_cut_by_a_break_stay_quiet(tmp_path):
    report, _ = run_script("clean_fresh_iter.py", tmp_path)
    assert not _fresh(report), [(f.code, f.message) for f in report.findings]


def test_a_short_run_of_fresh_iterators_without_a_repeat_yet_is_info(tmp_path):
    text = '''
import torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
ds = TensorDataset(torch.randn(4096, 4), torch.randn(4096, 1))
loader = DataLoader(ds, batch_size=8, shuffle=True)
net = nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.01)
for _ in range(10):
    x, t = next(iter(loader))  # HERE
    loss = ((net(x) - t) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
'''
    report, _ = run_script("short_fresh.py", tmp_path, source=text)
    [f] = _fresh(report)
    assert f.severity.value == "info" and f.line == 10
