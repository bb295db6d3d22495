# Source: crimeacs/seismic-augmentation, seismic_augmentation/augmentations.py (Normalize, AddRandomNoise, PolarityChange, FlipChannels), seismic_augmentation/composition.py, commit 2b1c7a3b416206d9a2af5bd4777b6be59c075a9b
# Report: https://github.com/crimeacs/seismic-augmentation/pull/5
# A seismic event detector (earthquake vs noise, 3-component ZNE waveforms) trained with the
# augmentation pipeline from the library's README: Compose([...augmentations..., Normalize()]).
# The STEAD/INSTANCE waveforms are replaced by synthetic 3x300 traces (a P/S wavelet pair on
# noise for events, coloured noise otherwise); a few noise records come from a dead station.
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class BaseAugmentation(object):
    def __init__(self, p: float = 1.0):
        assert 0 <= p <= 1.0, "p must be a value in the range [0, 1]"
        self.p = p

    def __call__(self, data: torch.tensor, sample_rate: int = 100):
        assert isinstance(data, torch.Tensor), "Waveform passed in must be a torch.tensor"

        if random.random() > self.p:
            return data

        return self.apply_transform(data, sample_rate)

    def apply_transform(self, data: torch.tensor, sample_rate: int = 100):
        raise NotImplementedError()


class FlipChannels(BaseAugmentation):
    def __init__(self, init_channel_order: str = 'ZNE', p: float = 1.0):
        super().__init__(p)
        assert init_channel_order == 'ZNE', 'Please convert your channel order to ZNE first'

    def apply_transform(self, data: torch.tensor, sample_rate: int = 100):
        assert data.size(0) == 3, "You need 3-component waveform to use this augmentation"
        permute = [0, 2, 1]
        permuted = data[permute, :]
        assert permuted.size() == data.size()
        return permuted


class AddRandomNoise(BaseAugmentation):
    def __init__(self, snr_level_db: float = 1., p: float = 1.0):
        super().__init__(p)
        self.snr_level_db = snr_level_db

    def apply_transform(self, data: torch.tensor, sample_rate: int = 100):
        noise = torch.randn_like(data)

        waveform_rms = torch.sqrt(torch.mean(torch.square(data), axis=-1))
        noise_rms = torch.sqrt(torch.mean(torch.square(noise), axis=-1))
        desired_noise_rms = waveform_rms / (10 ** (self.snr_level_db / 20))

        noise *= (desired_noise_rms / noise_rms).unsqueeze(-1)

        return data + noise


class PolarityChange(BaseAugmentation):
    def __init__(self, p: float = 1.0):
        super().__init__(p)

    def apply_transform(self, data: torch.tensor, sample_rate: int = 100):
        return data * -1


class Normalize(BaseAugmentation):
    def __init__(self, p: float = 1.0):
        super().__init__(p)

    def apply_transform(self, data: torch.tensor, sample_rate: int = 100):
        return data / data.abs().max(dim=-1, keepdim=True).values.max()


class Compose(object):
    def __init__(self, transforms: list, p: float = 1.0):
        assert 0 <= p <= 1.0, "p must be a value in the range [0, 1]"
        self.transforms = transforms
        self.p = p

    def __call__(self, data: torch.tensor, sample_rate: int):
        for transform in self.transforms:
            data = transform(data, sample_rate)
        return data


def make_waveforms(n, rng, npts=300):
    t = np.arange(npts) / 100.0
    waves = np.zeros((n, 3, npts), dtype=np.float32)
    labels = np.zeros(n, dtype=np.float32)
    for k in range(n):
        amp = 10 ** rng.uniform(1, 4)
        noise = np.cumsum(rng.randn(3, npts), axis=1) * 0.05 + rng.randn(3, npts)
        if k % 2 == 0:
            labels[k] = 1.0
            tp = rng.uniform(0.5, 1.2)
            ts = tp + rng.uniform(0.4, 1.0)
            for tt, f, gain in ((tp, 8.0, np.array([1.0, 0.3, 0.3])), (ts, 4.0, np.array([0.4, 1.0, 1.0]))):
                env = np.where(t >= tt, np.exp(-(t - tt) * 3.0), 0.0)
                waves[k] += (gain[:, None] * env * np.sin(2 * np.pi * f * (t - tt))).astype(np.float32) * 8
        waves[k] = (waves[k] + noise) * amp
        if k % 2 == 1 and k % 43 == 21:
            waves[k] = 0.0
    return torch.from_numpy(waves), torch.from_numpy(labels)


class WaveformDataset(Dataset):
    def __init__(self, waveforms, labels, augmentation, sample_rate=100):
        self.waveforms, self.labels = waveforms, labels
        self.augmentation, self.sample_rate = augmentation, sample_rate

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        waveform = self.augmentation(data=self.waveforms[idx].clone(), sample_rate=self.sample_rate)
        return waveform, self.labels[idx]


class EventDetector(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(3, 16, 7, padding=3), nn.BatchNorm1d(16), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(16, 32, 5, padding=2), nn.BatchNorm1d(32), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(32, 32, 5, padding=2), nn.BatchNorm1d(32), nn.ReLU(), nn.AdaptiveMaxPool1d(1),
            nn.Flatten(), nn.Linear(32, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


def main():
    random.seed(0)
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    train_x, train_y = make_waveforms(480, rng)
    val_x, val_y = make_waveforms(120, rng)

    aug = Compose([
        FlipChannels(init_channel_order='ZNE', p=0.5),
        AddRandomNoise(snr_level_db=10, p=0.5),
        PolarityChange(p=0.5),
        Normalize()
    ])
    train_loader = DataLoader(WaveformDataset(train_x, train_y, aug), batch_size=32, shuffle=True)
    val_loader = DataLoader(WaveformDataset(val_x, val_y, Compose([Normalize()])), batch_size=60)

    model = EventDetector()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.BCEWithLogitsLoss()
    for epoch in range(5):
        model.train()
        losses = []
        for step, (x, y) in enumerate(train_loader):
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in val_loader:
                correct += ((model(x) > 0).float() == y).sum().item()
        n_nan = sum(np.isnan(losses))
        print(f"epoch {epoch}: train loss {np.mean(losses):.4f} (nan steps {n_nan}/{len(losses)}), "
              f"val acc {correct / len(val_y):.3f}")


if __name__ == "__main__":
    main()
