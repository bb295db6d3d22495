# Source: machine-perception-robotics-group/MPRGDeepLearningLectureNotebook, 11_cnn_pytorch/01_cnn_dataloader_augmentation.ipynb (training loop), before the fix for issue #4
# Report: https://github.com/machine-perception-robotics-group/MPRGDeepLearningLectureNotebook/issues/4
from time import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class CNN(nn.Module):
    def __init__(self):
        super(CNN, self).__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3, stride=1, padding=1)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, stride=1, padding=1)
        self.l1 = nn.Linear(16 * 3 * 3, 64)
        self.l2 = nn.Linear(64, 10)
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)

    def forward(self, x):
        h = self.pool(self.act(self.conv1(x)))
        h = self.pool(self.act(self.conv2(h)))
        h = h.view(h.size()[0], -1)
        h = self.act(self.l1(h))
        h = self.l2(h)
        return h


def make_digits(n, g):
    templates = (torch.rand(10, 1, 12, 12, generator=torch.Generator().manual_seed(1)) > 0.6).float()
    label = torch.randint(0, 10, (n,), generator=g)
    image = templates[label] + 0.5 * torch.randn(n, 1, 12, 12, generator=g)
    return image, label


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    train_data = TensorDataset(*make_digits(3000, g))
    test_data = TensorDataset(*make_digits(1000, g))
    batch_size = 64
    train_loader = DataLoader(train_data, batch_size=batch_size, shuffle=True)
    test_loader = DataLoader(test_data, batch_size=100, shuffle=False)

    model = CNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = nn.CrossEntropyLoss()

    epoch_num = 5
    n_iter = len(train_loader)
    model.train()
    start = time()
    for epoch in range(1, epoch_num + 1):
        sum_loss = 0.0
        count = 0
        for image, label in train_loader:
            y = model(image)
            loss = criterion(y, label)
            model.zero_grad()
            loss.backward()
            optimizer.step()
            sum_loss += loss.item()
            pred = torch.argmax(y, dim=1)
            count += torch.sum(pred == label)
        print("epoch: {}, mean loss: {}, mean accuracy: {}, elapsed_time :{}".format(
            epoch,
            sum_loss / n_iter,
            count.item() / len(train_loader),
            time() - start))

    model.eval()
    count = 0
    with torch.no_grad():
        for image, label in test_loader:
            y = model(image)
            pred = torch.argmax(y, dim=1)
            count += torch.sum(pred == label)
    print("test accuracy: {}".format(count.item() / len(test_data)))


if __name__ == "__main__":
    main()
