"""Sensor readings that drift over time, standardized over all rows, then split by time: the last
fifth (the test rows) pulls the mean the training rows are scaled with."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset

torch.manual_seed(0)
X = torch.randn(300, 6) + torch.linspace(0, 3, 300)[:, None]
y = (X[:, 0] > X[:, 1]).float()
X = (X - X.mean(0)) / X.std(0)  # STATS
ds = TensorDataset(X, y)
train_ds, test_ds = Subset(ds, list(range(240))), Subset(ds, list(range(240, 300)))  # SPLIT
model = nn.Linear(6, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for xb, yb in DataLoader(train_ds, batch_size=40):
        loss = F.binary_cross_entropy_with_logits(model(xb).squeeze(1), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
