# Report: https://github.com/pytorch/pytorch/issues/26338
# A tabular classifier (a small MLP with dropout) trained by a Trainer class
# that evaluates after every epoch under model.eval() and torch.no_grad(), keeps the weights of the
# best validation epoch and reports test accuracy at the end. Synthetic data: 3 classes from a
# noisy nonlinear rule over 20 numeric features (a stand-in for a customer-segment table).
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def make_table(n, seed):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 20).astype(np.float32)
    score = np.stack([
        x[:, 0] + 0.8 * x[:, 1] * x[:, 2],
        x[:, 3] - x[:, 4] + 0.5 * np.sin(2 * x[:, 5]),
        0.7 * x[:, 6] + 0.7 * x[:, 7] - 0.4 * x[:, 0],
    ], axis=1) + 0.3 * rng.randn(n, 3)
    y = score.argmax(1).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


class Net(nn.Module):
    def __init__(self, n_in=20, hidden=64, n_classes=3, p=0.5):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, n_classes)
        self.p = p

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.dropout(x, p=self.p)
        x = F.relu(self.fc2(x))
        x = F.dropout(x, p=self.p)
        return self.out(x)


class Trainer:
    def __init__(self, model, train_loader, val_loader, lr=3e-3, epochs=15):
        self.model = model
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.epochs = epochs
        self.criterion = nn.CrossEntropyLoss()
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.best_acc, self.best_epoch, self.best_state = -1.0, -1, None

    def train_epoch(self):
        self.model.train()
        total, n = 0.0, 0
        for x, y in self.train_loader:
            self.optimizer.zero_grad()
            loss = self.criterion(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            total += loss.item() * len(y)
            n += len(y)
        return total / n

    @torch.no_grad()
    def evaluate(self, loader):
        self.model.eval()
        correct, total, loss_sum = 0, 0, 0.0
        for x, y in loader:
            logits = self.model(x)
            loss_sum += self.criterion(logits, y).item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            total += len(y)
        return loss_sum / total, correct / total

    def fit(self):
        for epoch in range(1, self.epochs + 1):
            train_loss = self.train_epoch()
            val_loss, val_acc = self.evaluate(self.val_loader)
            if val_acc > self.best_acc:
                self.best_acc, self.best_epoch = val_acc, epoch
                self.best_state = copy.deepcopy(self.model.state_dict())
            print(f"epoch {epoch:2d} train loss {train_loss:.4f} val loss {val_loss:.4f} val acc {val_acc:.4f}")
        self.model.load_state_dict(self.best_state)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x_tr, y_tr = make_table(3000, 1)
    x_va, y_va = make_table(600, 2)
    x_te, y_te = make_table(1500, 3)
    train_loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=64, shuffle=True)
    val_loader = DataLoader(TensorDataset(x_va, y_va), batch_size=256)
    test_loader = DataLoader(TensorDataset(x_te, y_te), batch_size=256)

    trainer = Trainer(Net(), train_loader, val_loader)
    trainer.fit()
    print(f"best val acc {trainer.best_acc:.4f} at epoch {trainer.best_epoch}")
    accs = [trainer.evaluate(test_loader)[1] for _ in range(3)]
    print("test acc of the restored model, evaluated 3 times: " + ", ".join(f"{a:.4f}" for a in accs))


if __name__ == "__main__":
    main()
