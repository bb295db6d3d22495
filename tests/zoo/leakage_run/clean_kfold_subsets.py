"""K-fold cross-validation the common PyTorch way: scikit-learn's KFold over the indices, a Subset
pair per fold over a Dataset that reads (and jitters) its rows on access, a new model per fold,
the validation Subset used after that fold's training loop."""
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
    scores = []
    for fold, (tr, va) in enumerate(KFold(5, shuffle=True, random_state=0).split(range(len(ds)))):
        model = nn.Linear(6, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for xb, yb in DataLoader(Subset(ds, tr), batch_size=20, shuffle=True):  # SPLIT
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            scores.append(sum((model(xb).argmax(1) == yb).sum().item()
                              for xb, yb in DataLoader(Subset(ds, va), batch_size=20)) / len(va))
