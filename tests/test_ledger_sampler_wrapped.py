"""A shuffling order differs between epochs, whatever wraps the sampler (issue 25, session 11,
`_ledger/_epochwrap.py`): `set_epoch` that reaches a wrapper but not the sampler it wraps replays
one order every epoch (`data.order_repeated`, the wrapper's class line)."""

from __future__ import annotations

import textwrap

from test_ledger import run_script

PROGRAM = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, TensorDataset

class IndexDataset(Dataset):
    def __init__(self, sampler):
        self.sampler = sampler
        self.order = None
    def __getitem__(self, i):
        return self.order[i]
    def __len__(self):
        return len(self.sampler)
    def reset(self):
        self.order = list(self.sampler)

class ShardingWrapper(DistributedSampler):  # HERE
    def __init__(self, sampler, **kw):
        super().__init__(IndexDataset(sampler), **kw)
    def __iter__(self):
        self.dataset.reset()
        return (self.dataset[i] for i in super().__iter__())
%s

class EpochShuffler(Sampler):
    def __init__(self, n, seed=0%s):
        self.n, self.seed, self.epoch = n, seed, 0
%s
    def set_epoch(self, epoch):
        self.epoch = epoch
    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())
    def __len__(self):
        return self.n

torch.manual_seed(0)
x = torch.randn(256, 8); y = (x[:, 0] > 0).long()
sampler = ShardingWrapper(EpochShuffler(256), num_replicas=2, rank=0, shuffle=False)
loader = DataLoader(TensorDataset(x, y), batch_size=32, sampler=sampler)
model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(4):
%s
    for xb, yb in loader:
        opt.zero_grad(); F.cross_entropy(model(xb), yb).backward(); opt.step()
"""

FORWARD = """
    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        self.dataset.sampler.set_epoch(epoch)
"""

SET_EPOCH = "    loader.sampler.set_epoch(epoch)"


def _run(tmp_path, forward="", shuffle_arg="", shuffle_attr="", call=SET_EPOCH):
    source = textwrap.dedent(PROGRAM) % (forward, shuffle_arg, shuffle_attr, call)
    report, _ = run_script("prog.py", tmp_path, source=source)
    line = next(i for i, s in enumerate(source.splitlines(), 1) if "# HERE" in s)
    return [f for f in report.findings if f.code == "data.order_repeated"], line


def test_set_epoch_that_stops_at_the_wrapper_repeats_the_order(tmp_path):
    [f], line = _run(tmp_path)
    assert (f.severity.value, f.line) == ("warning", line)
    ev = f.evidence
    assert (ev["sampler"], ev["wrapped_sampler"], ev["wrapped_sampler_epoch"]) == \
        ("ShardingWrapper", "EpochShuffler", 0)
    assert (ev["sampler_epochs"], ev["epochs_repeated"], ev["samples_per_epoch"]) == ([0, 1, 2, 3], [1, 2, 3], 128)
    assert "set_epoch() reached its ShardingWrapper (epochs 0, 1, 2, 3) but not the EpochShuffler" in f.message


def test_a_wrapper_that_forwards_set_epoch_is_quiet(tmp_path):  # the fixed twin
    found, _ = _run(tmp_path, forward=FORWARD)
    assert found == []


def test_no_set_epoch_at_all_or_a_wrapped_sampler_that_does_not_shuffle_is_quiet(tmp_path):
    # nothing asks for a new order per epoch: a fixed order is the program's choice
    found, _ = _run(tmp_path, call="    pass")
    assert found == []
    # the wrapped sampler says it does not shuffle
    found, _ = _run(tmp_path, shuffle_arg=", shuffle=False", shuffle_attr="        self.shuffle = shuffle")
    assert found == []
