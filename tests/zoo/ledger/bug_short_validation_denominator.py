# A "short" validation over at most 20 batches, its summed batch losses divided by 20 even when
# the validation loader has only 5 batches: every reported validation loss is 4 times too small.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def validate(model, loader, short_length=20):
    model.eval()
    val_loss = 0.0
    count = 0
    with torch.no_grad():
        for x, y in loader:
            val_loss = val_loss + F.mse_loss(model(x), y) / short_length  # HERE
            count += 1
            if count >= short_length:
                break
    return float(val_loss)


def main():
    torch.manual_seed(0)
    X = torch.randn(296, 4)
    Y = X.sum(1, keepdim=True)
    train_loader = DataLoader(TensorDataset(X[:256], Y[:256]), batch_size=16, shuffle=True)
    val_loader = DataLoader(TensorDataset(X[256:], Y[256:]), batch_size=8)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        model.train()
        for x, y in train_loader:
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
        print(epoch, validate(model, val_loader))


if __name__ == "__main__":
    main()
