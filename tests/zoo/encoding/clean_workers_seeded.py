"""Clean: synthetic samples from numpy's global generator (PyTorch seeds it per worker), from a
generator the dataset holds reseeded in worker_init_fn, and from a per-index seed."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, get_worker_info


class GlobalNoise(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        return torch.from_numpy(np.random.normal(size=(2, 6)).astype(np.float32)), int(np.random.randint(2))


class HeldGenerator(Dataset):
    def __init__(self):
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return 48

    def __getitem__(self, i):
        return torch.from_numpy(self.rng.normal(size=(2, 6)).astype(np.float32)), int(self.rng.integers(2))


class PerIndex(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(1000 + i)
        return torch.randn(2, 6, generator=g), i % 2


def reseed(worker_id):
    info = get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed % 2**32)


if __name__ == "__main__":
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loaders = [DataLoader(GlobalNoise(), batch_size=8, num_workers=2),
               DataLoader(HeldGenerator(), batch_size=8, num_workers=2, worker_init_fn=reseed),
               DataLoader(PerIndex(), batch_size=8, num_workers=2, shuffle=True)]
    for loader in loaders:
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
