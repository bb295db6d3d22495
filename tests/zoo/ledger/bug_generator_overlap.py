# A loader written by hand (a generator of shuffled batches) over index ranges that overlap:
# training rows 0-799 and validation rows 600-999, so 200 of the 400 validation rows are trained on.
import torch
import torch.nn as nn
import torch.nn.functional as F


def batches(X, y, batch_size, shuffle):
    order = torch.randperm(len(X)) if shuffle else torch.arange(len(X))
    for i in range(0, len(X), batch_size):
        idx = order[i:i + batch_size]
        yield X[idx], y[idx]


def main():
    torch.manual_seed(0)
    X, y = torch.randn(1000, 12), torch.randint(0, 3, (1000,))
    X_train, y_train = X[:800], y[:800]
    X_val, y_val = X[600:], y[600:]
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(3):
        model.train()
        for xb, yb in batches(X_train, y_train, 50, shuffle=True):
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            val_loss = sum(F.cross_entropy(model(xb), yb).item()  # HERE
                           for xb, yb in batches(X_val, y_val, 100, shuffle=False)) / 4
        print(f"epoch {epoch}: val loss {val_loss:.3f}")


if __name__ == "__main__":
    main()
