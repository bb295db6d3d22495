# A time split with pandas masks whose ranges overlap: days 70-79 are in both.
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

rng = np.random.default_rng(1)
df = pd.DataFrame(rng.normal(size=(400, 6)), columns=[f"f{i}" for i in range(6)])
df["day"] = np.repeat(np.arange(100), 4)
df["target"] = df.f0 * 2 + df.f1
features = [f"f{i}" for i in range(6)]
train_df = df[df.day < 80]
val_df = df[df.day >= 70]


def as_dataset(frame):
    return TensorDataset(torch.tensor(frame[features].values, dtype=torch.float32),
                         torch.tensor(frame[["target"]].values, dtype=torch.float32))


train_dl = DataLoader(as_dataset(train_df), batch_size=40, shuffle=True)
valid_dl = DataLoader(as_dataset(val_df), batch_size=40)  # HERE
model = nn.Linear(6, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(2):
    for xb, yb in train_dl:
        opt.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
    with torch.no_grad():
        val = sum(nn.functional.mse_loss(model(xb), yb).item() for xb, yb in valid_dl)
