"""Dtype fault: features come from numpy (float64) and meet a float32 model."""

import numpy as np
import torch
import torch.nn as nn

rng = np.random.default_rng(0)
features = rng.normal(size=(64, 8))  # float64, numpy's default
labels = (features.sum(axis=1) > 0).astype(np.int64)

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for start in range(0, 64, 16):
    x = torch.from_numpy(features[start:start + 16])  # still float64
    y = torch.from_numpy(labels[start:start + 16])
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
