"""A new random split every epoch (no fixed generator): the final test rows were trained on."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

X = torch.randn(240, 8)
y = (X[:, 0] + X[:, 1] > 0).long()
ds = TensorDataset(X, y)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    train_ds, test_ds = random_split(ds, [0.8, 0.2])  # SPLIT
    model.train()
    for xb, yb in DataLoader(train_ds, batch_size=32, shuffle=True):
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        correct = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in DataLoader(test_ds, batch_size=64))
print("test accuracy", correct / len(test_ds))
