# The validation part is drawn by a SubsetRandomSampler over one dataset, but the summed loss is
# divided by len(loader.dataset), the whole dataset: the reported mean is 20 % of the real one.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset


def main():
    torch.manual_seed(0)
    X = torch.randn(500, 4)
    ds = TensorDataset(X, X.sum(1, keepdim=True))
    perm = torch.randperm(500).tolist()
    train_loader = DataLoader(ds, batch_size=20, sampler=SubsetRandomSampler(perm[:400]))
    val_loader = DataLoader(ds, batch_size=20, sampler=SubsetRandomSampler(perm[400:]))
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        for x, y in train_loader:
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
        total = 0.0
        with torch.no_grad():
            for x, y in val_loader:
                total += F.mse_loss(model(x), y, reduction="sum").item()
        print(epoch, total / len(val_loader.dataset))  # HERE


if __name__ == "__main__":
    main()
