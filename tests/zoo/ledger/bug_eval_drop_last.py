# An evaluation loader copied from the training one, drop_last=True included: each validation
# pass leaves the final partial batch out, so the reported accuracy is over 192 of 200 samples.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    X, y = torch.randn(1000, 8), torch.randint(0, 2, (1000,))
    train_ds = TensorDataset(X[:800], y[:800])
    val_ds = TensorDataset(X[800:], y[800:])
    train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=64, shuffle=False, drop_last=True)  # HERE
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model.train()
        for xb, yb in train_loader:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for xb, yb in val_loader:
                correct += (model(xb).argmax(1) == yb).sum().item()
                total += len(yb)
        print(f"epoch {epoch}: val acc {correct / total:.3f}")


if __name__ == "__main__":
    main()
