"""Per-sample side data looked up by batch position while the loader shuffles (`data.side_misaligned`,
`_ledger/_sidedata.py`): side rows that match their samples in the loader that keeps dataset order
and no better than other samples' rows in the shuffled one. Side data looked up by the samples'
ids, a training loader in dataset order and inputs that are no side data stay quiet."""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script


def _run(tmp_path, source):
    return run_script("prog.py", tmp_path, checks=("data_ledger",), source=textwrap.dedent(source))[0]


_line = line_in


def _side(report):
    return [f for f in report.findings if f.code == "data.side_misaligned"]


PRIOR_MASKS = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

class Masks(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.y = (torch.rand(n, 1, 8, 8, generator=g) > 0.6).float()
        self.x = self.y.repeat(1, 3, 1, 1) + 0.5 * torch.randn(n, 3, 8, 8, generator=g)
        self.prior = (self.y + 0.3 * torch.randn(n, 1, 8, 8, generator=g)).clamp(0, 1)   # a weak model's masks
    def __len__(self):
        return len(self.y)
    def __getitem__(self, i):
        return (self.x[i], self.y[i], i) if WITH_INDEX else (self.x[i], self.y[i])

WITH_INDEX = %s
train_ds, val_ds = Masks(64, 0), Masks(32, 1)
train_loader = DataLoader(train_ds, batch_size=8, shuffle=%s)
val_loader = DataLoader(val_ds, batch_size=8, shuffle=False)
net = nn.Conv2d(4, 1, 3, padding=1)
opt = torch.optim.Adam(net.parameters(), 1e-2)

def priors(ds, i, b, batch):
    return ds.prior[batch[2]] if WITH_INDEX else ds.prior[i * b:(i + 1) * b]

for epoch in range(3):
    for i, batch in enumerate(train_loader):
        x, y = batch[0], batch[1]
        m = priors(train_ds, i, 8, batch)
        out = net(torch.cat([x, m], 1))  # HERE
        loss = F.binary_cross_entropy_with_logits(out, y)
        opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad():
        for i, batch in enumerate(val_loader):
            net(torch.cat([batch[0], priors(val_ds, i, 8, batch)], 1))
"""


PRIOR_MASKS_TWO_INPUTS = PRIOR_MASKS.replace("net = nn.Conv2d(4, 1, 3, padding=1)", """class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 1, 3, padding=1)
    def forward(self, x, m):
        return self.conv(torch.cat([x, m], 1))
net = Net()""").replace("net(torch.cat([x, m], 1))", "net(x, m)").replace(
    "net(torch.cat([batch[0], priors(val_ds, i, 8, batch)], 1))", "net(batch[0], priors(val_ds, i, 8, batch))")


def test_prior_masks_misaligned(tmp_path):
    src = PRIOR_MASKS_TWO_INPUTS % ("False", "True")
    [f] = _side(_run(tmp_path, src))
    assert (f.severity.value, f.line) == ("warning", _line(src))
    ev = f.evidence
    assert ev["contrast_ordered"] > 0.2 and abs(ev["contrast_shuffled"]) < 0.05 and ev["batches_shuffled"] == 24


def test_prior_masks_in_dataset_order_are_quiet(tmp_path):
    assert _side(_run(tmp_path, PRIOR_MASKS_TWO_INPUTS % ("False", "False"))) == []


def test_prior_masks_by_sample_index_are_quiet(tmp_path):
    assert _side(_run(tmp_path, PRIOR_MASKS_TWO_INPUTS % ("True", "True"))) == []


FEATURE_CACHE = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

def build(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long()), x + 0.2 * torch.randn(n, 16, generator=g)

class Fusion(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 2), nn.Linear(16, 2)
    def forward(self, x, cached):
        return self.a(x) + self.b(cached)

def run_epoch(model, loader, cache, opt=None):
    for step, (x, y) in enumerate(loader):
        side = %s
        out = model(x, side)  # HERE
        if opt is not None:
            loss = F.cross_entropy(out, y)
            opt.zero_grad(); loss.backward(); opt.step()

train, train_cache = build(120, 0)
val, val_cache = build(40, 1)
model = Fusion()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    run_epoch(model, DataLoader(train, batch_size=10, shuffle=True), train_cache, opt)
    with torch.no_grad():
        run_epoch(model, DataLoader(val, batch_size=10), val_cache)
"""


def test_cached_features_by_step_counter(tmp_path):
    src = FEATURE_CACHE % "cache[step * 10:(step + 1) * 10]"
    [f] = _side(_run(tmp_path, src))
    assert (f.severity.value, f.line) == ("warning", _line(src))


def test_noise_input_beside_the_batch_is_quiet(tmp_path):
    assert _side(_run(tmp_path, FEATURE_CACHE % "torch.randn_like(x)")) == []


SOFT_LABELS = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

class SelfDistillTrainer:
    def __init__(self, n=96, classes=4):
        g = torch.Generator().manual_seed(0)
        y = torch.randint(0, classes, (n,), generator=g)
        self.onehot = F.one_hot(y, classes).float()
        x = self.onehot @ torch.randn(classes, 12, generator=g) + 0.3 * torch.randn(n, 12, generator=g)
        self.train_ds = TensorDataset(x[:64], self.onehot[:64])
        self.val_ds = TensorDataset(x[64:], self.onehot[64:])
        noisy = (self.onehot + 0.4 * torch.rand(n, classes, generator=g)).softmax(1)
        self.soft_train, self.soft_val = noisy[:64], noisy[64:]
        self.bs = 8

    def fit(self, epochs):
        for _ in range(epochs):
            for k, (x, t) in enumerate(DataLoader(self.train_ds, batch_size=self.bs, shuffle=True)):
                soft = self.soft_train[k * self.bs:(k + 1) * self.bs]
                loss = F.cross_entropy(self.step_model(x, soft), t)
                self.opt.zero_grad(); loss.backward(); self.opt.step()
            with torch.no_grad():
                for k, (x, t) in enumerate(DataLoader(self.val_ds, batch_size=self.bs)):
                    self.step_model(x, self.soft_val[k * self.bs:(k + 1) * self.bs])

class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 4)
    def forward(self, x, soft):
        return self.lin(torch.cat([x, soft], 1))

t = SelfDistillTrainer()
head = Head()
t.opt = torch.optim.Adam(head.parameters(), 1e-2)
t.step_model = head
t.fit(2)
"""


def test_soft_labels_by_batch_counter_in_a_class_trainer(tmp_path):
    [f] = _side(_run(tmp_path, SOFT_LABELS))
    assert f.severity.value == "warning"
    assert f.evidence["contrast_ordered"] > 0.2


DEVICE_AUGMENT = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

g = torch.Generator().manual_seed(0)
x = torch.randn(96, 1, 8, 8, generator=g)
y = (x.mean((1, 2, 3)) > 0).long()
train = TensorDataset(x[:64], y[:64])
val = TensorDataset(x[64:], y[64:])
net = nn.Sequential(nn.Flatten(), nn.Linear(64, 2))
opt = torch.optim.SGD(net.parameters(), lr=0.1)

def to_device(t):
    return t.clone()          # stands for .cuda(): a new tensor, the same values

def gpu_augment(t):
    shift = torch.randint(-3, 4, (2,))
    return torch.roll(t, (int(shift[0]), int(shift[1])), (2, 3)) * (1 + 0.5 * torch.randn(t.shape[0], 1, 1, 1))

for epoch in range(3):
    for xb, yb in DataLoader(train, batch_size=8, shuffle=True):
        loss = F.cross_entropy(net(gpu_augment(to_device(xb))), yb)
        opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad():
        for xb, yb in DataLoader(val, batch_size=8):
            net(to_device(xb))
"""


def test_batch_moved_and_augmented_on_the_device_is_no_side_data(tmp_path):
    assert _side(_run(tmp_path, DEVICE_AUGMENT)) == []
