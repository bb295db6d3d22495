"""K-fold cross-validation over Subset pairs, but one model carried across the folds: by fold 2
it has been trained on the rows fold 2 holds out, so every fold's score after the first is
measured on rows it was trained on."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.model_selection import KFold
from torch.utils.data import DataLoader, Dataset, Subset


class Rows(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 6, generator=g)
        self.y = (self.x.sum(1) > 0).long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i] + 0.01 * torch.randn(6), self.y[i]


if __name__ == "__main__":
    torch.manual_seed(0)
    ds = Rows(100)
    model = nn.Linear(6, 2)  # the bug: built once, outside the fold loop
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scores = []
    for fold, (tr, va) in enumerate(KFold(4, shuffle=True, random_state=0).split(range(len(ds)))):
        train_ds, val_ds = Subset(ds, tr), Subset(ds, va)  # SPLIT
        model.train()
        for xb, yb in DataLoader(train_ds, batch_size=25, shuffle=True):
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            scores.append(sum((model(xb).argmax(1) == yb).sum().item()
                              for xb, yb in DataLoader(val_ds, batch_size=25)) / len(va))
