"""An evaluation that is not a function of the weights (`data.eval_inputs_random`, session 15):
an evaluation dataset of its own whose transform draws at random (noise in a plain loop, a NumPy
random crop in a trainer class, torch's crop in a dict-returning dataset), or one read twice over
the same weights; the warning names the transform and the line that built the dataset. Quiet: a
fixed center crop, test-time augmentation averaged in the evaluation loop, a random transform
seeded per sample; a random pair drawn by `__getitem__` itself stays an info."""

from __future__ import annotations

import pathlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def found(report: torchtriage.Report) -> list[torchtriage.Finding]:
    return report.filter(code="data.eval_inputs_random")


class Images(Dataset):
    def __init__(self, n: int, seed: int, transform=None, size: int = 12) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.rand(n, 3, size, size, generator=g)
        self.y = (self.x.mean((1, 2, 3)) > 0.5).long()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        x = self.x[i]
        if self.transform is not None:
            x = self.transform(x)  # <- applied
        return x, self.y[i]


class AddNoise:
    def __init__(self, std: float) -> None:
        self.std = std

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.std * torch.randn_like(x)


class NumpyRandomCrop:
    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        i, j = np.random.randint(0, x.shape[-1] - self.size + 1, size=2)
        return x[:, i:i + self.size, j:j + self.size]


class TorchRandomCrop:
    def __init__(self, size: int, generator: torch.Generator | None = None) -> None:
        self.size, self.generator = size, generator

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        top = int(torch.randint(0, x.shape[-1] - self.size + 1, (1,), generator=self.generator))
        left = int(torch.randint(0, x.shape[-1] - self.size + 1, (1,), generator=self.generator))
        return x[:, top:top + self.size, left:left + self.size]


class CenterCrop:
    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        o = (x.shape[-1] - self.size) // 2
        return x[:, o:o + self.size, o:o + self.size]


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))


def fit(model, opt, train_loader, test_loader, epochs: int = 3, tta: int = 0) -> list[float]:
    accs = []
    for _ in range(epochs):
        model.train()
        for x, y in train_loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in test_loader:
                if tta:
                    logits = sum(model(x[..., :, torch.randperm(x.shape[-1])]) for _ in range(tta)) / tta
                else:
                    logits = model(x)
                correct += (logits.argmax(1) == y).sum().item()
        accs.append(correct / len(test_loader.dataset))
    return accs


# ---------------------------------------------------------------- bugs
def test_plain_loop_noise_in_the_test_transform():
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = DataLoader(Images(64, 0, AddNoise(0.1)), batch_size=16, shuffle=True)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        test_set = Images(32, 1, transform=AddNoise(0.1))  # <- built A
        test_loader = DataLoader(test_set, batch_size=16)
        fit(model, opt, train_loader, test_loader)
    [f] = found(s.report)
    assert (f.severity, f.line) == (Severity.WARNING, line("built A"))
    ev = f.evidence
    assert ev["random_in"] == "AddNoise" and ev["samples_changed"] == 32 and ev["same_weights_both_passes"] is False
    assert ev["applied_at"].endswith(f":{line('applied')}") and ev["probe_max_difference"] > 0.05
    assert "its dataset applies AddNoise" in f.message


def test_trainer_class_with_a_numpy_random_crop_for_validation():
    class Trainer:
        def __init__(self) -> None:
            self.model = net()
            self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-2)
            self.train_loader = DataLoader(Images(64, 2, NumpyRandomCrop(8)), batch_size=16, shuffle=True)
            self.val_loader = DataLoader(Images(48, 3, NumpyRandomCrop(8)), batch_size=16)  # <- built B

        def run(self) -> list[float]:
            return fit(self.model, self.opt, self.train_loader, self.val_loader, epochs=2)

    np.random.seed(0)
    state = np.random.get_state()[1].copy()
    with torchtriage.watch(on_anomaly="record", report=False) as s:
        Trainer().run()
    [f] = found(s.report)
    assert (f.severity, f.line) == (Severity.WARNING, line("built B"))
    assert f.evidence["random_in"] == "NumpyRandomCrop"
    assert not np.array_equal(np.random.get_state()[1], state)  # (the user's own draws happened)


def test_the_same_checkpoint_scored_twice_differs():
    class Faces(Dataset):
        def __init__(self, n: int) -> None:
            self.x = torch.rand(n, 3, 12, 12, generator=torch.Generator().manual_seed(4))

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> dict:
            return {"image": TorchRandomCrop(10)(self.x[i]), "label": int(i % 2)}

    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = DataLoader(Images(64, 5, CenterCrop(10)), batch_size=16, shuffle=True)
    test_loader = DataLoader(Faces(32), batch_size=8)  # <- built C

    def evaluate() -> float:
        model.eval()
        with torch.no_grad():
            return sum((model(b["image"]).argmax(1) == b["label"]).sum().item() for b in test_loader) / 32

    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for x, y in train_loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        evaluate()
        evaluate()  # the same weights, scored again
    [f] = found(s.report)
    assert f.severity == Severity.WARNING and f.line == line("built C")
    assert f.evidence["same_weights_both_passes"] is True and f.evidence["random_in"] == "TorchRandomCrop"
    assert "the same weights were evaluated in both passes" in f.message


# ---------------------------------------------------------------- look-alikes
def test_fixed_center_crop_is_quiet():
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = DataLoader(Images(64, 6, TorchRandomCrop(10)), batch_size=16, shuffle=True)
    test_loader = DataLoader(Images(32, 7, CenterCrop(10)), batch_size=16)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        fit(model, opt, train_loader, test_loader)
    assert found(s.report) == []


def test_test_time_augmentation_averaged_in_the_loop_is_quiet():
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = DataLoader(Images(64, 8, TorchRandomCrop(10)), batch_size=16, shuffle=True)
    test_loader = DataLoader(Images(32, 9, CenterCrop(10)), batch_size=16)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        fit(model, opt, train_loader, test_loader, tta=4)
    assert found(s.report) == []


def test_random_transform_seeded_per_sample_is_quiet():
    class Seeded(Images):
        def __getitem__(self, i: int):
            g = torch.Generator().manual_seed(1000 + i)  # the same crop of sample i in every pass
            return TorchRandomCrop(10, generator=g)(self.x[i]), self.y[i]

    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = DataLoader(Images(64, 10, TorchRandomCrop(10)), batch_size=16, shuffle=True)
    test_loader = DataLoader(Seeded(32, 11), batch_size=16)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        fit(model, opt, train_loader, test_loader)
    assert found(s.report) == []


def test_probe_leaves_the_random_streams_as_they_were():
    """The report's probe reads samples at the end: the user's generators continue unchanged."""
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = DataLoader(Images(64, 12, CenterCrop(10)), batch_size=16, shuffle=True)
    test_loader = DataLoader(Images(32, 13, AddNoise(0.1)), batch_size=16)
    torch.manual_seed(3)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        fit(model, opt, train_loader, test_loader, epochs=2)
        inside = torch.get_rng_state()
    assert found(s.report) and torch.equal(torch.get_rng_state(), inside)
