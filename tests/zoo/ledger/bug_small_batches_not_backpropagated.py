# Training on the hard examples of each batch; when fewer than 48 remain, the loss is kept "for
# accumulation" but backward is never called on it, and the next step's zero_grad() resets anyway.
import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    torch.manual_seed(0)
    batches = []
    for i in range(150):
        x = torch.randn(64, 8)
        batches.append((x, (x[:, 0] > 0).float()))
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    pending = 0
    for step, (x, y) in enumerate(batches):
        opt.zero_grad()
        p = torch.sigmoid(model(x)).squeeze(1)  # HERE
        hard = (p - y).abs() > 0.1
        loss = F.binary_cross_entropy(p[hard], y[hard]) if hard.any() else p.sum() * 0
        pending += int(hard.sum())
        if pending < 48:
            continue
        loss.backward()
        opt.step()
        pending = 0


if __name__ == "__main__":
    main()
