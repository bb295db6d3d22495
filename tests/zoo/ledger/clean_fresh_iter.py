# Iterators made once per epoch, renewed on StopIteration, itertools.cycle, an infinite sampler,
# a loop that stops after a few batches, and one sample batch drawn per epoch for a plot: quiet.
import itertools

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

torch.manual_seed(0)
X = torch.randn(256, 8)
y = (X[:, 0] > 0).long()
ds = TensorDataset(X, y)
loader = DataLoader(ds, batch_size=32, shuffle=True)
val_loader = DataLoader(ds, batch_size=64)
model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def step(xb, yb):
    loss = nn.functional.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()


for epoch in range(3):  # once per epoch
    it = iter(loader)
    for _ in range(len(loader)):
        step(*next(it))
    with torch.no_grad():  # a sample batch to look at
        xv, _ = next(iter(val_loader))
        model(xv)

it = iter(loader)  # renewed when exhausted
for _ in range(20):
    try:
        xb, yb = next(it)
    except StopIteration:
        it = iter(loader)
        xb, yb = next(it)
    step(xb, yb)

cyc = itertools.cycle(loader)
for _ in range(20):
    step(*next(cyc))

endless = DataLoader(ds, batch_size=32, sampler=RandomSampler(ds, replacement=True, num_samples=10 ** 6))
for _ in range(12):  # a sampler with replacement, drawn afresh: its own draws repeat anyway
    step(*next(iter(endless)))

for epoch in range(10):  # a quick run: one batch per epoch
    for i, (xb, yb) in enumerate(loader):
        step(xb, yb)
        break
