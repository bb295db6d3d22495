# Hand-written batch generators over disjoint index ranges, a train-accuracy pass on the training
# tensor, and an agent that acts on its states before learning from them: nothing held out is trained on.
import torch
import torch.nn as nn
import torch.nn.functional as F


def batches(X, y, batch_size):
    order = torch.randperm(len(X))
    for i in range(0, len(X), batch_size):
        idx = order[i:i + batch_size]
        yield X[idx], y[idx]


def main():
    torch.manual_seed(0)
    X, y = torch.randn(1000, 12), torch.randint(0, 3, (1000,))
    perm = torch.randperm(1000)
    X_train, y_train, X_val, y_val = X[perm[:800]], y[perm[:800]], X[perm[800:]], y[perm[800:]]
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(3):
        for xb, yb in batches(X_train, y_train, 50):
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
        with torch.no_grad():
            train_acc = (model(X_train).argmax(1) == y_train).float().mean().item()
            val_acc = (model(X_val).argmax(1) == y_val).float().mean().item()
        print(f"epoch {epoch}: train {train_acc:.3f} val {val_acc:.3f}")
    policy = nn.Linear(4, 2)
    popt = torch.optim.SGD(policy.parameters(), lr=0.01)
    states = torch.randint(0, 3, (16, 4)).float()
    for _ in range(20):
        with torch.no_grad():
            actions = policy(states).argmax(1)
        loss = F.cross_entropy(policy(states), actions)
        popt.zero_grad()
        loss.backward()
        popt.step()
        states = (states + torch.randint(0, 2, (16, 4))).remainder(3)


if __name__ == "__main__":
    main()
