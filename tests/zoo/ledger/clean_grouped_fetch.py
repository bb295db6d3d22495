# Gradient accumulation that fetches each cycle's batches at once, before their work (the HF
# Trainer's get_batch_samples): every batch is trained on, 4 forwards after 4 fetches.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(256, 8)
y = (X[:, 0] > 0).long()
train_loader = DataLoader(TensorDataset(X, y), batch_size=8, shuffle=True)
model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
accum = 4
for epoch in range(3):
    it = iter(train_loader)
    for _ in range(len(train_loader) // accum):
        batches = [next(it) for _ in range(accum)]  # one cycle's micro-batches
        for xb, yb in batches:
            loss = nn.functional.cross_entropy(model(xb), yb) / accum
            loss.backward()
        opt.step()
        opt.zero_grad()
    for _ in it:  # (the sampler runs out: the epoch is complete)
        pass
