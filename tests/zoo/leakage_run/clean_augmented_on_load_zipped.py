"""Rows read and augmented on access (no batch equals a stored row), split once with Subset
index lists; each step trains on a training batch and scores a validation batch of the same
size from a second loader zipped with the first (both batches fresh at the training forward:
neither is taken for the other)."""
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
    full = Noisy(128)
    order = torch.randperm(len(full)).tolist()
    train_ds, val_ds = Subset(full, order[:96]), Subset(full, order[96:])  # SPLIT
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(2):
        val_loader = DataLoader(val_ds, batch_size=16, shuffle=True)
        for (xb, yb), (xv, yv) in zip(DataLoader(train_ds, batch_size=16, shuffle=True), val_loader):
            xb, xv = xb * 1.0, xv * 1.0  # new tensors, as .to(device) makes them
            model.train()
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            model.eval()
            with torch.no_grad():
                val_loss = F.cross_entropy(model(xv), yv)
