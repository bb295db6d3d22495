# A split by hand with numpy index arrays whose ranges overlap: 40 validation samples are
# training samples too.
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Subset, TensorDataset

rng = np.random.default_rng(0)
torch.manual_seed(0)
X = torch.randn(400, 10)
y = (X[:, :3].sum(1) > 0).long()
dataset = TensorDataset(X, y)
perm = rng.permutation(len(dataset))
train_idx, val_idx = perm[:320], perm[280:]
train_loader = DataLoader(Subset(dataset, train_idx), batch_size=32, shuffle=True)
val_loader = DataLoader(Subset(dataset, val_idx), batch_size=64)  # HERE
model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    model.train()
    for xb, yb in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for xb, yb in val_loader:
            correct += (model(xb).argmax(1) == yb).sum().item()
