# Means whose denominators are the counts summed: len(loader), len(loader.dataset) over the whole
# dataset, a count kept by the loop (tokens), a quick look cut by a break, gradient accumulation
# dividing each loss by its steps, and a running average printed every few batches.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    X = torch.randn(300, 4)
    Y = X.sum(1, keepdim=True)
    train_loader = DataLoader(TensorDataset(X[:240], Y[:240]), batch_size=16, shuffle=True)
    val_loader = DataLoader(TensorDataset(X[240:], Y[240:]), batch_size=8)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    accum, num_batches, print_every = 4, 3, 5
    for epoch in range(2):
        model.train()
        epoch_loss, running = 0.0, 0.0
        for i, (x, y) in enumerate(train_loader):
            loss = F.mse_loss(model(x), y) / accum
            loss.backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
            epoch_loss += loss.item() * accum / len(train_loader)
            running += loss.item() * accum
            epoch_loss_scaled = epoch_loss + loss.item() / accum
            if (i + 1) % print_every == 0:
                print(f"batch {i + 1}: loss {running / print_every:.3f}")
                running = 0.0
        model.eval()
        total, seen, tokens = 0.0, 0, 0
        with torch.no_grad():
            for x, y in val_loader:
                total += F.mse_loss(model(x), y, reduction="sum").item()
                tokens += int((x != 0).sum())
                seen += len(x)
            look = 0.0
            for j, (x, y) in enumerate(val_loader):
                if j >= num_batches:
                    break
                look += F.mse_loss(model(x), y).item()
        print(epoch, epoch_loss, total / len(val_loader.dataset), total / seen,
              total / tokens, look / num_batches)


if __name__ == "__main__":
    main()
