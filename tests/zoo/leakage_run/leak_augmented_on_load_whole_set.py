"""A Dataset that reads its rows on access and augments them (noise on load, as an image
transform does): no batch equals a stored row. Split with Subset index lists from a
permutation; the training loader wraps the whole dataset instead of the training Subset."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset


class Noisy(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 6, generator=g)
        self.y = (self.x.sum(1) > 0).long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i] + 0.05 * torch.randn(6), self.y[i]


if __name__ == "__main__":
    torch.manual_seed(0)
    full = Noisy(120)
    order = torch.randperm(len(full)).tolist()
    train_ds, test_ds = Subset(full, order[:90]), Subset(full, order[90:])  # SPLIT
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(2):
        model.train()
        for xb, yb in DataLoader(full, batch_size=16, shuffle=True):  # the bug: `full`, not `train_ds`
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        acc = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in DataLoader(test_ds, batch_size=16)) / 30
