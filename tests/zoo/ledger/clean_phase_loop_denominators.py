# One loop runs a training and a validation phase over two loaders (`for data in loaders[phase]`),
# summing each phase's loss into its own total; after both phases each total is divided by its own
# loader's length. At the end of the validation pass the training total is divided by the training
# loader's length: that is the training pass's mean, not a wrong count of the validation pass.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def fit(model, train_loader, val_loader, optimizer, epochs):
    loaders = {"train": train_loader, "val": val_loader}
    for epoch in range(epochs):
        loss_per_epoch, val_loss_per_epoch = 0.0, 0.0
        for phase in ("train", "val"):
            model.train(phase == "train")
            for x, y in loaders[phase]:
                loss = F.mse_loss(model(x), y)
                if phase == "train":
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    loss_per_epoch += loss.item()
                else:
                    val_loss_per_epoch += loss.item()
        print(epoch, loss_per_epoch / len(train_loader), val_loss_per_epoch / len(val_loader))


def main():
    torch.manual_seed(0)
    X = torch.randn(300, 4)
    Y = X.sum(1, keepdim=True)
    train_loader = DataLoader(TensorDataset(X[:240], Y[:240]), batch_size=16, shuffle=True)
    val_loader = DataLoader(TensorDataset(X[240:], Y[240:]), batch_size=30)
    model = nn.Linear(4, 1)
    fit(model, train_loader, val_loader, torch.optim.SGD(model.parameters(), lr=0.05), 2)


if __name__ == "__main__":
    main()
