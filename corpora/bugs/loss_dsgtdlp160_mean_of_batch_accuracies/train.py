# Source: DSGT-DLP/Deep-Learning-Playground, backend/dl/dl_trainer.py (train_deep_classification_model, compute_accuracy), before the fix for issue #160
# Report: https://github.com/DSGT-DLP/Deep-Learning-Playground/issues/160
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def compute_accuracy(predicted, actual):
    prediction = torch.argmax(predicted, dim=-1)
    num_correct = torch.sum(prediction == actual)
    accuracy = num_correct / len(actual)
    return accuracy.item()


def train_deep_classification_model(model, train_loader, test_loader, optimizer, criterion, epochs):
    train_loss, test_loss, epoch_train_acc, epoch_test_acc = [], [], [], []
    for epoch in range(epochs):
        train_correct, batch_train_loss = [], []
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            pred = model(x)
            loss = criterion(pred, y)
            loss.backward()
            optimizer.step()
            batch_train_loss.append(loss.item())
            train_correct.append(compute_accuracy(pred, y))
        test_correct, batch_test_loss = [], []
        model.eval()
        with torch.no_grad():
            for x, y in test_loader:
                pred = model(x)
                batch_test_loss.append(criterion(pred, y).item())
                test_correct.append(compute_accuracy(pred, y))
        epoch_train_acc.append(np.mean(train_correct))
        epoch_test_acc.append(np.mean(test_correct))
        train_loss.append(np.mean(batch_train_loss))
        test_loss.append(np.mean(batch_test_loss))
        print(f"epoch: {epoch}, train loss: {train_loss[-1]:.4f}, test loss: {test_loss[-1]:.4f}, "
              f"train acc: {epoch_train_acc[-1]:.4f}, test acc: {epoch_test_acc[-1]:.4f}")
    with torch.no_grad():
        xs, ys = test_loader.dataset.tensors
        print(f"accuracy over all {len(ys)} test samples: {compute_accuracy(model(xs), ys):.4f}")
    return epoch_test_acc


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(3, 8, generator=g) * 1.2
    y = torch.randint(0, 3, (530,), generator=g)
    x = centers[y] + torch.randn(530, 8, generator=g)
    train_ds, test_ds = TensorDataset(x[:400], y[:400]), TensorDataset(x[400:], y[400:])
    train_loader = DataLoader(train_ds, batch_size=64, shuffle=True)
    test_loader = DataLoader(test_ds, batch_size=64, shuffle=False)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    train_deep_classification_model(model, train_loader, test_loader, optimizer, nn.CrossEntropyLoss(), epochs=5)


if __name__ == "__main__":
    main()
