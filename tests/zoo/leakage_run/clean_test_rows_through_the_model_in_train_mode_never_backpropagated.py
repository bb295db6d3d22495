"""MC-dropout predictions on the test rows mid-training: the model stays in train() mode and grad
is on (the forward builds a graph), but no backward ever reaches that output: nothing trained on
the test rows."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

g = torch.Generator().manual_seed(0)
torch.manual_seed(0)
X = torch.randn(300, 6)
y = (X[:, 0] + 0.5 * X[:, 1] > 0).float()
train_ds, test_ds = random_split(TensorDataset(X, y), [240, 60], generator=g)  # SPLIT
X_test = torch.stack([test_ds[i][0] for i in range(len(test_ds))])
y_test = torch.stack([test_ds[i][1] for i in range(len(test_ds))])
model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
step = 0
for epoch in range(4):
    for xb, yb in DataLoader(train_ds, batch_size=40, shuffle=True, generator=g):
        loss = F.binary_cross_entropy_with_logits(model(xb).squeeze(1), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 6 == 3:
            samples = torch.stack([torch.sigmoid(model(X_test).squeeze(1)) for _ in range(10)])
            acc = ((samples.mean(0) > 0.5).float() == y_test).float().mean()
            print(f"step {step}: MC test accuracy {acc.item():.3f}, spread {samples.std(0).mean().item():.3f}")
