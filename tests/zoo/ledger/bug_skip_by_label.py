# Batches without a positive example are skipped ("nothing to learn"): on imbalanced data most
# batches are. Custom sampler, two worker processes.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Sampler, TensorDataset


class Sequential(Sampler):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n


def main():
    torch.manual_seed(0)
    X = torch.randn(320, 6)
    y = torch.zeros(320, dtype=torch.long)
    y[:64] = 1  # the positives are the first 64 rows: batches 0-3 of 20
    loader = DataLoader(TensorDataset(X, y), batch_size=16, sampler=Sequential(320), num_workers=2)
    model = nn.Linear(6, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(2):
        for xb, yb in loader:
            if yb.sum() == 0:  # HERE
                continue
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
