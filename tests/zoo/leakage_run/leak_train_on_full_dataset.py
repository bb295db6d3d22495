"""The split is drawn, but the training loader wraps the whole dataset."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

g = torch.Generator().manual_seed(0)
X = torch.randn(200, 4, generator=g)
y = X.sum(1, keepdim=True)
full = TensorDataset(X, y)
train_ds, val_ds = random_split(full, [160, 40], generator=g)  # SPLIT
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for xb, yb in DataLoader(full, batch_size=50):  # the bug: `full`, not `train_ds`
    loss = F.mse_loss(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    val = sum(F.mse_loss(model(xb), yb).item() for xb, yb in DataLoader(val_ds, batch_size=40))
