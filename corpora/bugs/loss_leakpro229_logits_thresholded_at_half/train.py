# Source: aidotse/LeakPro, examples/mia/tabular_mia/utils/adult_model_preparation.py, commit c47752fad0fb48cba7d4d03023cdcedf267501c4
# Report: https://github.com/aidotse/LeakPro/issues/229
# Target-model training of LeakPro's Adult membership-inference example: AdultNet (3-layer MLP
# returning one logit), BCEWithLogitsLoss, SGD(lr=0.1, momentum=0.8), train accuracy and
# loss per epoch, then evaluate() on the test split. The Adult census table is replaced by a
# synthetic table of the same layout (6 standardised numeric + one-hot categorical columns,
# about 24% positives).
import numpy as np
import torch
from torch import cuda, device, nn, no_grad, optim, sigmoid
from torch.utils.data import DataLoader, TensorDataset


class AdultNet(nn.Module):
    def __init__(self, input_size, hidden_size, num_classes):
        super(AdultNet, self).__init__()
        self.init_params = {"input_size": input_size,
                            "hidden_size": hidden_size,
                            "num_classes": num_classes}
        self.fc1 = nn.Linear(input_size, hidden_size)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(hidden_size, hidden_size)
        self.fc3 = nn.Linear(hidden_size, num_classes)

    def forward(self, x):
        out = self.fc1(x)
        out = self.relu(out)
        out = self.fc2(out)
        out = self.relu(out)
        out = self.fc3(out)
        return out

def evaluate(model, loader, criterion, device):
    model.eval()
    loss, acc = 0, 0
    with no_grad():
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            target = target.float().unsqueeze(1)
            output = model(data)
            loss += criterion(output, target).item()
            pred = sigmoid(output) >= 0.5
            acc += pred.eq(target.data.view_as(pred)).sum()
        loss /= len(loader)
        acc = float(acc) / len(loader.dataset)
    return loss, acc

def create_trained_model_and_metadata(model, train_loader, test_loader, epochs = 10, metadata = None):

    device_name = device("cuda" if cuda.is_available() else "cpu")
    model.to(device_name)
    model.train()

    criterion = nn.BCEWithLogitsLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.8)
    train_losses, train_accuracies = [], []
    test_losses, test_accuracies = [], []

    for e in range(epochs):
        model.train()
        train_acc, train_loss = 0.0, 0.0

        for data, target in train_loader:
            target = target.float().unsqueeze(1)
            data, target = data.to(device_name, non_blocking=True), target.to(device_name, non_blocking=True)
            optimizer.zero_grad()
            output = model(data)

            loss = criterion(output, target)
            pred = output >= 0.5
            train_acc += pred.eq(target).sum().item()

            loss.backward()
            optimizer.step()
            train_loss += loss.item()

        train_loss /= len(train_loader)
        train_acc /= len(train_loader.dataset)

        train_losses.append(train_loss)
        train_accuracies.append(train_acc)

        test_loss, test_acc = evaluate(model, test_loader, criterion, device_name)
        test_losses.append(test_loss)
        test_accuracies.append(test_acc)
        print(f"Epoch {e+1}/{epochs} - Train Loss: {train_loss:.4f}, Train Accuracy: {train_acc:.4f}, "
              f"Test Loss: {test_loss:.4f}, Test Accuracy: {test_acc:.4f}")

    model.to("cpu")
    meta_data = {"train_acc": train_acc, "test_acc": test_acc, "train_loss": train_loss, "test_loss": test_loss}
    return model, meta_data


def make_adult_like(n, rng):
    num = rng.randn(n, 6).astype(np.float32)
    cats = [rng.randint(0, k, n) for k in (8, 16, 7, 14, 6, 5, 2)]
    onehot = np.concatenate([np.eye(k, dtype=np.float32)[c] for k, c in zip((8, 16, 7, 14, 6, 5, 2), cats)], 1)
    score = 1.2 * num[:, 0] + 0.9 * num[:, 2] + 0.8 * num[:, 4] + 1.5 * (cats[1] > 11) + 1.0 * (cats[3] < 3) - 1.2
    y = (score + rng.randn(n) * 1.5 > 0).astype(np.int64)
    return np.concatenate([num, onehot], 1), y


def main():
    torch.manual_seed(1234)
    rng = np.random.RandomState(0)
    x, y = make_adult_like(6000, rng)
    print(f"positives: {y.mean():.3f}")
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    train_loader = DataLoader(TensorDataset(x[:4000], y[:4000]), batch_size=128, shuffle=True)
    test_loader = DataLoader(TensorDataset(x[4000:], y[4000:]), batch_size=128, shuffle=False)
    model = AdultNet(input_size=x.shape[1], hidden_size=64, num_classes=1)
    model, meta = create_trained_model_and_metadata(model, train_loader, test_loader, epochs=8)
    print(f"final train_acc {meta['train_acc']:.4f} test_acc {meta['test_acc']:.4f}")


if __name__ == "__main__":
    main()
