# Model selection on the test set: the validation loader reads the test data.
import copy

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
train = TensorDataset(torch.randn(200, 5), torch.randint(0, 2, (200,)))
test = TensorDataset(torch.randn(80, 5), torch.randint(0, 2, (80,)))
train_loader = DataLoader(train, batch_size=20, shuffle=True)
val_loader = DataLoader(test, batch_size=40)
test_loader = DataLoader(test, batch_size=40)  # HERE
model = nn.Linear(5, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
best, best_model = -1.0, None
for epoch in range(3):
    for xb, yb in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    with torch.no_grad():
        acc = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val_loader)
    if acc > best:
        best, best_model = acc, copy.deepcopy(model)
with torch.no_grad():
    final = sum((best_model(xb).argmax(1) == yb).sum().item() for xb, yb in test_loader)
