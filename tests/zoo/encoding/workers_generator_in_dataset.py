"""Synthetic shapes drawn from a RandomState the dataset holds: each of the 2 workers gets a
copy of it in the same state, so the workers generate the same images."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class RandomShapes(Dataset):
    def __init__(self, n=96, seed=0):
        self.n = n
        self.rs = np.random.RandomState(seed)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        label = int(self.rs.randint(2))
        img = self.rs.normal(0, 0.3, (1, 8, 8)).astype(np.float32)
        r, c = self.rs.randint(0, 5, size=2)
        img[0, r:r + 3, c:c + 3] += 1.0 if label else -1.0
        return torch.from_numpy(img), label


if __name__ == "__main__":
    loader = DataLoader(RandomShapes(), batch_size=8, num_workers=2)  # HERE
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
