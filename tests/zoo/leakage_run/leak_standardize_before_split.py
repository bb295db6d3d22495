"""The whole dataset standardized with its own mean/std, then split."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

g = torch.Generator().manual_seed(0)
X = torch.randn(300, 6) * 3 + 5
y = (X[:, 0] > 5).float()
X = (X - X.mean(0)) / X.std(0)  # STATS
train_ds, val_ds = random_split(TensorDataset(X, y), [240, 60], generator=g)  # SPLIT
model = nn.Linear(6, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for xb, yb in DataLoader(train_ds, batch_size=40):
        loss = F.binary_cross_entropy_with_logits(model(xb).squeeze(1), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
