"""Minority-class rows duplicated to balance the classes, then split: copies land in test."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

g = torch.Generator().manual_seed(1)
X = torch.randn(300, 5, generator=g)
y = (X[:, 0] > 1.0).long()  # ~16% positives
minority = X[y == 1]
X = torch.cat([X, minority.repeat(3, 1)])
y = torch.cat([y, torch.ones(3 * len(minority), dtype=torch.long)])
train_ds, test_ds = random_split(TensorDataset(X, y), [0.8, 0.2], generator=g)  # SPLIT
model = nn.Linear(5, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for xb, yb in DataLoader(train_ds, batch_size=64, shuffle=True, generator=g):
    loss = F.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
