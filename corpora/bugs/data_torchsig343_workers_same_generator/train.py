# Report: https://github.com/TorchDSP/torchsig/issues/343
# Fix: https://github.com/TorchDSP/torchsig/pull/361
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class Seedable:
    def __init__(self, seed=None, **kwargs):
        self.rng_seed = seed
        self.random_generator = np.random.default_rng(seed)

    def seed(self, seed):
        self.rng_seed = seed
        self.random_generator = np.random.default_rng(seed)

    def get_distribution(self, value_range):
        return lambda: self.random_generator.uniform(value_range[0], value_range[1])


class ToneSignalBuilder(Seedable):
    def __init__(self, num_iq_samples=128, **kwargs):
        super().__init__(**kwargs)
        self.num_iq_samples = num_iq_samples
        self.center_freq_distribution = self.get_distribution((-0.4, 0.4))
        self.snr_db_distribution = self.get_distribution((0.0, 20.0))

    def build(self, class_index):
        t = np.arange(self.num_iq_samples)
        f = self.center_freq_distribution()
        tone = np.exp(2j * np.pi * f * t) * (1 + class_index * (t % (class_index + 2) == 0))
        noise_power = 10 ** (-self.snr_db_distribution() / 10)
        noise = np.sqrt(noise_power / 2) * (self.random_generator.normal(size=t.size) + 1j * self.random_generator.normal(size=t.size))
        return tone + noise


class TorchSigDataset(Dataset, Seedable):
    def __init__(self, num_classes=4, dataset_length=512, **kwargs):
        Seedable.__init__(self, **kwargs)
        self.num_classes = num_classes
        self.dataset_length = dataset_length
        self.builder = ToneSignalBuilder(seed=kwargs.get("seed"))

    def __len__(self):
        return self.dataset_length

    def __getitem__(self, idx):
        class_index = int(self.random_generator.integers(self.num_classes))
        iq = self.builder.build(class_index)
        data = torch.from_numpy(np.stack([iq.real, iq.imag]).astype(np.float32))
        return data, class_index


def main():
    torch.manual_seed(0)
    dataset = TorchSigDataset(num_classes=4, dataset_length=512, seed=1234)
    loader = DataLoader(dataset, batch_size=32, num_workers=2, shuffle=False)
    model = nn.Sequential(nn.Conv1d(2, 16, 7, padding=3), nn.ReLU(), nn.AdaptiveAvgPool1d(8), nn.Flatten(), nn.Linear(128, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    seen = []
    for epoch in range(2):
        for step, (data, label) in enumerate(loader):
            loss = F.cross_entropy(model(data), label)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen.append(data)
        print(f"epoch {epoch} loss {loss.item():.4f}")
    allx = torch.cat(seen).flatten(1)
    unique = torch.unique(allx, dim=0).shape[0]
    print(f"generated {allx.shape[0]} training examples over 2 epochs, distinct: {unique}")


if __name__ == "__main__":
    main()
