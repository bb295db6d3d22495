# Correct splits, made the same ways as the leaky scripts: disjoint numpy index arrays, disjoint
# slices, a train-accuracy pass over the training set, a validation and a test loader.
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Subset, TensorDataset

rng = np.random.default_rng(0)
torch.manual_seed(0)
X = torch.randn(500, 10)
y = (X[:, :3].sum(1) > 0).long()
dataset = TensorDataset(X, y)
perm = rng.permutation(400)
train_idx, val_idx = perm[:320], perm[320:]
train_loader = DataLoader(Subset(dataset, train_idx), batch_size=32, shuffle=True)
train_eval_loader = DataLoader(Subset(dataset, train_idx), batch_size=128)
val_loader = DataLoader(Subset(dataset, val_idx), batch_size=64)
test_loader = DataLoader(TensorDataset(X[400:], y[400:]), batch_size=100)
model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)


def accuracy(loader):
    model.eval()
    with torch.no_grad():
        hits = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in loader)
    model.train()
    return hits


for epoch in range(3):
    for xb, yb in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    accuracy(train_eval_loader)
    accuracy(val_loader)
accuracy(test_loader)
