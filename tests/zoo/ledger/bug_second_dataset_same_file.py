# Two datasets read from the same CSV file: the training one takes the first 240 rows, the
# validation one was meant to take the rest and reads the whole file.
import csv
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class TableDataset(Dataset):
    def __init__(self, path, start=0, stop=None):
        with open(path) as fh:
            rows = [[float(v) for v in r] for r in csv.reader(fh)]
        rows = rows[start:stop]
        self.x = torch.tensor([r[:-1] for r in rows])
        self.y = torch.tensor([r[-1] for r in rows])

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def main(folder):
    rng = np.random.default_rng(2)
    path = os.path.join(folder, "table.csv")
    data = rng.normal(size=(300, 5))
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows(np.c_[data, data[:, 0] > 0].tolist())
    train_set = TableDataset(path, 0, 240)
    val_set = TableDataset(path)
    train_loader = DataLoader(train_set, batch_size=24, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=60)  # HERE
    model = nn.Linear(5, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(2):
        for xb, yb in train_loader:
            opt.zero_grad()
            nn.functional.binary_cross_entropy_with_logits(model(xb).squeeze(1), yb).backward()
            opt.step()
        with torch.no_grad():
            for xb, yb in val_loader:
                model(xb)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
