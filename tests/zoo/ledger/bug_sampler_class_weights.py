# Class balancing with a WeightedRandomSampler given one weight per class (1 / class counts)
# instead of one per sample: it draws only samples 0 and 1 of the 600, every epoch.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler


def main():
    torch.manual_seed(0)
    X = torch.randn(600, 8)
    y = (torch.rand(600) < 0.2).long()
    train_ds = TensorDataset(X, y)
    class_counts = np.unique(y.numpy(), return_counts=True)[1]
    sampler = WeightedRandomSampler(1 / class_counts, len(train_ds))  # HERE
    train_loader = DataLoader(train_ds, batch_size=32, sampler=sampler)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(3):
        for xb, yb in train_loader:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()


if __name__ == "__main__":
    main()
