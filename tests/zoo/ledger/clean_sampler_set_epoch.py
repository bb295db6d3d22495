# The same loop with set_epoch called each epoch: a new order every epoch.
#
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

torch.manual_seed(0)
X = torch.randn(128, 4)
y = X.sum(1, keepdim=True)
ds = TensorDataset(X, y)
sampler = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True)
loader = DataLoader(ds, batch_size=8, sampler=sampler)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(3):
    sampler.set_epoch(epoch)
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
