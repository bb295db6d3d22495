# Train and validation cut from one array by slices that overlap (an off-by-50 split point).
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
X = torch.randn(400, 3, 8, 8)
y = torch.randint(0, 4, (400,))
X_train, y_train = X[:300], y[:300]
X_val, y_val = X[250:], y[250:]
train_loader = DataLoader(TensorDataset(X_train, y_train), batch_size=25, shuffle=True)
val_loader = DataLoader(TensorDataset(X_val, y_val), batch_size=50)  # HERE
model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(2):
    model.train()
    for xb, yb in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val_loader) / 150
