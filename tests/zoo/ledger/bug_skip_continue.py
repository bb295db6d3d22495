# Every fourth batch is skipped by a condition: each epoch trains on 3/4 of the data.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(256, 8)
y = (X[:, 0] > 0).long()
train_loader = DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True)
model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for i, (xb, yb) in enumerate(train_loader):
        if i % 4 == 3:  # HERE
            continue
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
