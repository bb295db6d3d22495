# A GAN-style loop that takes each step's batch with next(iter(loader)): every step builds a new
# shuffled iterator and keeps its first batch, so an epoch's steps draw with replacement.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(512, 8)
y = (X[:, 0] > 0).long()
train_loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(3):
    for step in range(len(train_loader)):
        xb, yb = next(iter(train_loader))  # HERE
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
