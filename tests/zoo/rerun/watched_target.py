# The same hand-written relative error against a target built once before the loop, under
# watch(bundle_dir=...) in the user's own script (issue 27: the repro loop on every path).
import torch
import torch.nn as nn

import torchtriage

torch.manual_seed(0)
n = 256
X = torch.randn(n, 8)
target = torch.rand(n, 1) + 0.5
target[77] = 0.0
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with torchtriage.watch(model, opt, on_anomaly="record", bundle_dir="bundle"):
    for step in range(3):
        pred = model(X)
        loss = (((pred - target) / target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
