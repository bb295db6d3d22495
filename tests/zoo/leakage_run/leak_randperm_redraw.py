"""An index-permutation split redrawn each epoch: every row ends up trained on. The model
lives inside main(), so it is gone before the session ends."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    X = torch.randn(160, 4)
    y = X @ torch.tensor([1.0, -2.0, 0.5, 0.0])
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(3):
        perm = torch.randperm(len(X))  # SPLIT
        tr, te = perm[:128], perm[128:]
        X_tr, y_tr, X_te, y_te = X[tr], y[tr], X[te], y[te]
        for i in range(0, 128, 32):
            loss = F.mse_loss(model(X_tr[i:i + 32]).squeeze(1), y_tr[i:i + 32])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            test_mse = F.mse_loss(model(X_te).squeeze(1), y_te).item()
    return test_mse


if __name__ == "__main__":
    main()
