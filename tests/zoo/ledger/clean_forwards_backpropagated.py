# Forwards that all reach a backward, or are measurements: losses of several forwards summed into
# one backward (accumulation by summing), a train-accuracy forward without no_grad at its own line,
# and a frozen teacher in train() mode whose output is only a target.
import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    torch.manual_seed(0)
    batches = [torch.randn(32, 8) for _ in range(40)]
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    teacher = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for i in range(0, 40, 4):
        opt.zero_grad()
        total = 0
        for x in batches[i:i + 4]:
            target = teacher(x).detach()
            total = total + F.mse_loss(model(x), target)
        total.backward()
        opt.step()
        acc = (model(batches[i]).sign() == teacher(batches[i]).sign()).float().mean()
        print(i, total.item(), acc.item())


if __name__ == "__main__":
    main()
