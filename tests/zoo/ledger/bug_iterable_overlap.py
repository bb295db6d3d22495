# Streams of rows (an IterableDataset sharded over worker processes), with validation read from
# an overlapping range of the same array: rows 300-399 are in both.
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Rows(IterableDataset):
    def __init__(self, X, y, start, end):
        self.X, self.y, self.start, self.end = X, y, start, end

    def __iter__(self):
        info = get_worker_info()
        step, first = (info.num_workers, info.id) if info else (1, 0)
        for i in range(self.start + first, self.end, step):
            yield self.X[i], self.y[i]


def main():
    torch.manual_seed(0)
    X, y = torch.randn(500, 10), torch.randint(0, 2, (500,))
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    train_loader = DataLoader(Rows(X, y, 0, 400), batch_size=25, num_workers=workers, in_order=False)
    val_loader = DataLoader(Rows(X, y, 300, 500), batch_size=50)  # HERE
    model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for xb, yb in train_loader:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
        with torch.no_grad():
            acc = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val_loader) / 200
        print(f"epoch {epoch}: val acc {acc:.3f}")


if __name__ == "__main__":
    main()
