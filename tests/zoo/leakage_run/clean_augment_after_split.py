"""Split first (index permutation), then oversample and augment the training part only;
the model also minibatches with a fresh randperm each epoch (not a split)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X = torch.randn(200, 6)
y = (X[:, 0] > 0.8).long()
perm = torch.randperm(len(X))  # SPLIT
train_idx, test_idx = perm[:160], perm[160:]
X_train, y_train, X_test, y_test = X[train_idx], y[train_idx], X[test_idx], y[test_idx]
pos = X_train[y_train == 1]
X_train = torch.cat([X_train, pos, pos + 0.01 * torch.randn_like(pos)])
y_train = torch.cat([y_train, torch.ones(2 * len(pos), dtype=torch.long)])
model = nn.Linear(6, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    order = torch.randperm(len(X_train))
    for i in range(0, len(X_train), 50):
        batch = order[i:i + 50]
        loss = F.cross_entropy(model(X_train[batch]), y_train[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(X_test).argmax(1) == y_test).float().mean()
    model.train()
