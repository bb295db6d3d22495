# A DistributedSampler whose set_epoch is never called: every epoch replays the first order.
# (num_replicas/rank given: one process standing for rank 0 of 2.)
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

torch.manual_seed(0)
X = torch.randn(128, 4)
y = X.sum(1, keepdim=True)
ds = TensorDataset(X, y)
sampler = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True)
loader = DataLoader(ds, batch_size=8, sampler=sampler)  # HERE
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(3):
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
