"""Augmented copies appended before an index-permutation split."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(150, 6)
y = (X[:, :2].sum(1) > 0).long()
X = torch.cat([X, X[:50]])  # "augmentation": the first 50 rows again
y = torch.cat([y, y[:50]])
perm = torch.randperm(len(X))  # SPLIT
k = int(0.8 * len(X))
train_idx, test_idx = perm[:k], perm[k:]
X_train, y_train, X_test, y_test = X[train_idx], y[train_idx], X[test_idx], y[test_idx]
model = nn.Linear(6, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(0, k, 40):
    loss = F.cross_entropy(model(X_train[i:i + 40]), y_train[i:i + 40])
    opt.zero_grad()
    loss.backward()
    opt.step()
