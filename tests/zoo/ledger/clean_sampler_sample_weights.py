# Class balancing done right: one weight per sample (its class's inverse frequency), also over
# a Subset (the weights follow the Subset's samples) and with fewer draws than the dataset.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset, WeightedRandomSampler


def main():
    torch.manual_seed(0)
    X = torch.randn(600, 8)
    y = (torch.rand(600) < 0.2).long()
    full = TensorDataset(X, y)
    train_ds = Subset(full, list(range(500)))
    labels = y[:500].numpy()
    class_weights = 1 / np.unique(labels, return_counts=True)[1]
    sample_weights = class_weights[labels]
    sampler = WeightedRandomSampler(sample_weights, len(train_ds))
    train_loader = DataLoader(train_ds, batch_size=32, sampler=sampler)
    short = DataLoader(train_ds, batch_size=32, sampler=WeightedRandomSampler(sample_weights, 64))
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(2):
        for loader in (train_loader, short):
            for xb, yb in loader:
                opt.zero_grad()
                F.cross_entropy(model(xb), yb).backward()
                opt.step()


if __name__ == "__main__":
    main()
