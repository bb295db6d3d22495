# The same scans split by patient (GroupShuffleSplit): no patient is on both sides.
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from sklearn.model_selection import GroupShuffleSplit
from torch.utils.data import DataLoader, Dataset


class ScanDataset(Dataset):
    def __init__(self, frame):
        self.frame = frame.reset_index(drop=True)
        self.x = torch.tensor(frame[[f"f{i}" for i in range(8)]].values, dtype=torch.float32)
        self.y = torch.tensor(frame["label"].values)

    def __len__(self):
        return len(self.frame)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


rng = np.random.default_rng(0)
df = pd.DataFrame(rng.normal(size=(400, 8)), columns=[f"f{i}" for i in range(8)])
df["patient_id"] = np.repeat([f"P{i:03d}" for i in range(50)], 8)
df["label"] = (df.f0 > 0).astype(int)
train_rows, val_rows = next(GroupShuffleSplit(test_size=0.2, random_state=0).split(df, groups=df.patient_id))
train_loader = DataLoader(ScanDataset(df.iloc[train_rows]), batch_size=32, shuffle=True)
val_loader = DataLoader(ScanDataset(df.iloc[val_rows]), batch_size=80)
model = nn.Linear(8, 2)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(2):
    for xb, yb in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    with torch.no_grad():
        for xb, yb in val_loader:
            model(xb)
