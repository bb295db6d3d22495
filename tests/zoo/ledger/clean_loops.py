# Correct loops that leave samples out on purpose or stop early: drop_last, a final partial
# batch skipped by size, gradient accumulation (a backward per batch, or one backward over
# four batches' summed loss), a WeightedRandomSampler with replacement, early stopping after a
# full epoch, and a run limited by a step count (a break in the middle of an epoch).
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

torch.manual_seed(0)
X = torch.randn(200, 8)
y = (X[:, 0] > 0).long()
ds = TensorDataset(X, y)
model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.05)


def loss_of(xb, yb):
    return nn.functional.cross_entropy(model(xb), yb)


dropping = DataLoader(ds, batch_size=32, shuffle=True, drop_last=True)
for epoch in range(2):
    for xb, yb in dropping:
        opt.zero_grad()
        loss_of(xb, yb).backward()
        opt.step()

by_size = DataLoader(ds, batch_size=48, shuffle=True)
for epoch in range(2):
    for xb, yb in by_size:
        if xb.shape[0] < 48:
            continue
        opt.zero_grad()
        loss_of(xb, yb).backward()
        opt.step()

accumulating = DataLoader(ds, batch_size=10, shuffle=True)
for epoch in range(2):
    for i, (xb, yb) in enumerate(accumulating):
        (loss_of(xb, yb) / 4).backward()
        if i % 4 == 3:
            opt.step()
            opt.zero_grad()

summed = DataLoader(ds, batch_size=10, shuffle=True)
for epoch in range(2):
    total = 0.0
    for i, (xb, yb) in enumerate(summed):
        total = total + loss_of(xb, yb)
        if i % 4 == 3:
            opt.zero_grad()
            total.backward()
            opt.step()
            total = 0.0

weights = torch.where(y == 1, 3.0, 1.0)
weighted = DataLoader(ds, batch_size=20, sampler=WeightedRandomSampler(weights, 200, replacement=True))
for epoch in range(2):
    for xb, yb in weighted:
        opt.zero_grad()
        loss_of(xb, yb).backward()
        opt.step()

stopping = DataLoader(ds, batch_size=20, shuffle=True)
best = float("inf")
for epoch in range(10):
    for xb, yb in stopping:
        opt.zero_grad()
        loss_of(xb, yb).backward()
        opt.step()
    with torch.no_grad():
        val = loss_of(X, y).item()
    if val > best - 1e-3:
        break
    best = val

limited = DataLoader(ds, batch_size=8, shuffle=True)
step = 0
for epoch in range(100):
    for xb, yb in limited:
        opt.zero_grad()
        loss_of(xb, yb).backward()
        opt.step()
        step += 1
        if step >= 40:
            break
    if step >= 40:
        break
