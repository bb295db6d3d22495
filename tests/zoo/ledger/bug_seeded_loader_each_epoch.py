# The loader is rebuilt each epoch with a generator seeded the same way: one order, every epoch.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(96, 4)
y = X[:, :1] * 2
ds = TensorDataset(X, y)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(4):
    loader = DataLoader(ds, batch_size=12, shuffle=True, generator=torch.Generator().manual_seed(42))  # HERE
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
