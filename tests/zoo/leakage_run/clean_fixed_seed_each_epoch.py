"""The split is drawn inside the loop, but with the same seed each time: the same split."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

X = torch.randn(200, 4)
y = X.sum(1, keepdim=True)
ds = TensorDataset(X, y)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(3):
    train_ds, val_ds = random_split(ds, [160, 40], generator=torch.Generator().manual_seed(42))  # SPLIT
    for xb, yb in DataLoader(train_ds, batch_size=40):
        loss = F.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        val = [F.mse_loss(model(xb), yb) for xb, yb in DataLoader(val_ds, batch_size=40)]
