"""One split with a fixed generator, drawn before the loop; train on train, evaluate on test,
and also measure training accuracy under no_grad (evaluating training rows is fine)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

g = torch.Generator().manual_seed(0)
X = torch.randn(240, 8, generator=g)
y = (X[:, 0] > 0).long()
train_ds, val_ds, test_ds = random_split(TensorDataset(X, y), [0.7, 0.15, 0.15], generator=g)  # SPLIT
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    model.train()
    for xb, yb in DataLoader(train_ds, batch_size=32, shuffle=True, generator=g):
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        for loader in (DataLoader(train_ds, batch_size=64), DataLoader(val_ds, batch_size=64)):
            acc = [(model(xb).argmax(1) == yb).float().mean() for xb, yb in loader]
with torch.no_grad():
    test_acc = [(model(xb).argmax(1) == yb).float().mean() for xb, yb in DataLoader(test_ds, batch_size=64)]
