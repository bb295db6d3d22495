"""Evaluation inputs that change from pass to pass (`data.eval_inputs_random`, `_ledger/_repeatable.py`)
when the loader delivers integer samples: uint8 images scaled after the loader, int16 audio, integer
samples of several axes. Token ids (integer rows of one axis) are masked at random on purpose and
stay out, and so do evaluation splits of their own without augmentation."""

from __future__ import annotations

import textwrap

from _lines import line_in
from test_ledger import run_script


def _run(tmp_path, source):
    return run_script("prog.py", tmp_path, checks=None, source=textwrap.dedent(source))[0]


_line = line_in


def _random(report):
    return [f for f in report.findings if f.code == "data.eval_inputs_random"]


def _alarms(report):
    return [(f.code, f.severity.value, f.message) for f in report.findings if f.severity.value in ("warning", "error")]


UINT8_PLAIN = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, random_split

class Photos(Dataset):
    def __init__(self, n=160, jitter=%s):
        rng = np.random.RandomState(0)
        self.images = rng.randint(0, 256, (n, 20, 20, 3)).astype(np.uint8)
        self.labels = (self.images.mean((1, 2, 3)) > 127).astype(np.int64)
        self.jitter = jitter
    def __len__(self):
        return len(self.labels)
    def __getitem__(self, i):
        img = self.images[i].astype(np.int16)
        if self.jitter:
            img = img + np.random.randint(-20, 21)          # brightness
            top, left = np.random.randint(0, 5, 2)          # random crop, padded back
            img = np.pad(img[top:top + 16, left:left + 16], ((2, 2), (2, 2), (0, 0)))
        img = np.clip(img, 0, 255).astype(np.uint8)
        return torch.from_numpy(img).permute(2, 0, 1).contiguous(), self.labels[i]

np.random.seed(0)
torch.manual_seed(0)
data = Photos()
train_set, val_set = random_split(data, [128, 32], generator=torch.Generator().manual_seed(0))
train_loader = DataLoader(train_set, batch_size=16, shuffle=True)
val_loader = DataLoader(val_set, batch_size=16)  # HERE
model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 20 * 20, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(3):
    model.train()
    for images, labels in train_loader:
        loss = F.cross_entropy(model(images.float() / 255), labels)
        opt.zero_grad(); loss.backward(); opt.step()
    model.eval()
    with torch.no_grad():
        acc = sum((model(x.float() / 255).argmax(1) == y).sum().item() for x, y in val_loader) / len(val_set)
    print(epoch, acc)
"""


def test_uint8_images_of_a_split_with_the_training_jitter(tmp_path):
    src = UINT8_PLAIN % "True"
    [f] = _random(_run(tmp_path, src))
    assert (f.severity.value, f.line) == ("warning", _line(src))
    assert f.evidence["samples_compared"] == 32 and f.evidence["samples_changed"] >= 24
    assert f.evidence["dataset_shared_with_training"] is True


def test_uint8_images_without_jitter_stay_quiet(tmp_path):
    report = _run(tmp_path, UINT8_PLAIN % "False")
    assert _random(report) == [] and _alarms(report) == []


AUDIO_FUNCTIONS = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset

class Clips(Dataset):
    def __init__(self, n=120, length=400):
        g = np.random.default_rng(1)
        self.wave = (g.standard_normal((n, length)) * 3000).astype(np.int16)
        self.label = (np.abs(self.wave).mean(1) > 2400).astype(np.int64)
        self.augment = True
    def __len__(self):
        return len(self.label)
    def __getitem__(self, i):
        w = self.wave[i]
        if self.augment:
            w = np.roll(w, np.random.randint(-50, 50)) // np.random.randint(1, 3)   # shift and gain
        return torch.from_numpy(w.astype(np.int16)), self.label[i]

def make_loaders(ds):
    order = np.random.default_rng(2).permutation(len(ds))
    return (DataLoader(Subset(ds, order[:90].tolist()), batch_size=15, shuffle=True),
            DataLoader(Subset(ds, order[90:].tolist()), batch_size=15))  # HERE

def fit(model, loader, opt):
    model.train()
    for w, y in loader:
        loss = F.cross_entropy(model(w.float() / 32768), y)
        opt.zero_grad(); loss.backward(); opt.step()

@torch.no_grad()
def score(model, loader):
    model.eval()
    return float(np.mean([F.cross_entropy(model(w.float() / 32768), y).item() for w, y in loader]))

np.random.seed(3)
clips = Clips()
train_loader, dev_loader = make_loaders(clips)
net = nn.Sequential(nn.Linear(400, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(net.parameters(), 1e-3)
for epoch in range(3):
    fit(net, train_loader, opt)
    print(score(net, dev_loader))
"""


def test_int16_audio_subset_with_random_shift_and_gain(tmp_path):
    [f] = _random(_run(tmp_path, AUDIO_FUNCTIONS))
    assert (f.severity.value, f.line) == ("warning", _line(AUDIO_FUNCTIONS))
    assert f.evidence["samples_compared"] == 30 and f.evidence["samples_changed"] >= 20


CHANNELS_LAST_TRAINER = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, random_split

class Tiles(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 256, (100, 12, 12, 3), generator=g, dtype=torch.uint8)
        self.y = (self.x.float().mean((1, 2, 3)) > 127.5).long()
        self.train_mode = True
    def __len__(self):
        return 100
    def __getitem__(self, i):
        img = self.x[i]
        if self.train_mode and %s:
            noise = torch.randint(-12, 13, img.shape)
            img = (img.int() + noise).clamp(0, 255).to(torch.uint8)
        return img, self.y[i]

class Trainer:
    def __init__(self, dataset):
        self.dataset = dataset
        tr, va = random_split(dataset, [80, 20], generator=torch.Generator().manual_seed(4))
        self.train_loader = DataLoader(tr, batch_size=10, shuffle=True)
        self.val_loader = DataLoader(va, batch_size=10)  # HERE
        self.model = nn.Sequential(nn.Flatten(), nn.Linear(432, 2))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)

    def training_epoch(self):
        self.model.train()
        for x, y in self.train_loader:
            loss = F.cross_entropy(self.model(x.float() / 255), y)
            self.opt.zero_grad(); loss.backward(); self.opt.step()

    def validation_epoch(self):
        self.model.eval()
        self.dataset.train_mode = %s
        with torch.no_grad():
            out = [F.cross_entropy(self.model(x.float() / 255), y).item() for x, y in self.val_loader]
        self.dataset.train_mode = True
        return sum(out) / len(out)

t = Trainer(Tiles())
for epoch in range(3):
    t.training_epoch()
    print(t.validation_epoch())
"""


def test_channels_last_uint8_trainer_with_noise_in_validation(tmp_path):
    src = CHANNELS_LAST_TRAINER % ("True", "True")
    [f] = _random(_run(tmp_path, src))
    assert (f.severity.value, f.line) == ("warning", _line(src))
    assert f.evidence["samples_compared"] == 20


def test_augmentation_switched_off_for_validation_stays_quiet(tmp_path):
    """The dataset object is shared, but the trainer turns its augmentation off while validating."""
    report = _run(tmp_path, CHANNELS_LAST_TRAINER % ("True", "False"))
    assert _random(report) == [] and _alarms(report) == []


MASKED_TOKENS = """
import torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

torch.manual_seed(0)
ids = torch.randint(5, 60, (200, 24), dtype=torch.int32)
train_set, val_set = random_split(TensorDataset(ids), [160, 40], generator=torch.Generator().manual_seed(0))

def mask_tokens(batch):
    x = torch.stack([b[0] for b in batch]).long()
    labels = x.clone()
    masked = torch.rand(x.shape) < 0.15
    x[masked] = 1
    labels[~masked] = -100
    return x, labels

emb, head = nn.Embedding(64, 16), nn.Linear(16, 64)
opt = torch.optim.Adam(list(emb.parameters()) + list(head.parameters()), 1e-3)
for epoch in range(3):
    for x, labels in DataLoader(train_set, batch_size=20, shuffle=True, collate_fn=mask_tokens):
        loss = F.cross_entropy(head(emb(x)).reshape(-1, 64), labels.reshape(-1), ignore_index=-100)
        opt.zero_grad(); loss.backward(); opt.step()
    with torch.no_grad():
        print(sum(F.cross_entropy(head(emb(x)).reshape(-1, 64), labels.reshape(-1)).item()
                  for x, labels in DataLoader(val_set, batch_size=20, collate_fn=mask_tokens)))
"""


def test_masked_token_ids_in_evaluation_stay_quiet(tmp_path):
    report = _run(tmp_path, MASKED_TOKENS)
    assert _random(report) == []
