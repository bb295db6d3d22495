# Source: sinhasam/vaal, solver.py (Solver.train / validate / test) and vgg.py, before the fix for issue #2
# Report: https://github.com/sinhasam/vaal/issues/2
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from sklearn.metrics import accuracy_score
from torch.utils.data import DataLoader, TensorDataset


class VGG(nn.Module):
    def __init__(self, cfg=(16, 'M', 32, 'M'), num_classes=10):
        super(VGG, self).__init__()
        layers, in_channels = [], 3
        for v in cfg:
            if v == 'M':
                layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
            else:
                layers += [nn.Conv2d(in_channels, v, kernel_size=3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                in_channels = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(32 * 2 * 2, 64), nn.ReLU(True), nn.Dropout(),
            nn.Linear(64, 64), nn.ReLU(True), nn.Dropout(),
            nn.Linear(64, num_classes),
        )

    def forward(self, x):
        x = self.features(x)
        x = x.view(x.size(0), -1)
        return self.classifier(x)


class Solver:
    def __init__(self, args, test_dataloader):
        self.args = args
        self.test_dataloader = test_dataloader
        self.ce_loss = nn.CrossEntropyLoss()

    def read_data(self, dataloader, labels=True):
        while True:
            for img, label, _ in dataloader:
                yield img, label

    def train(self, querry_dataloader, val_dataloader, task_model):
        self.args.train_iterations = (self.args.num_images * self.args.train_epochs) // self.args.batch_size
        lr_change = self.args.train_iterations // 4
        labeled_data = self.read_data(querry_dataloader)
        optim_task_model = optim.SGD(task_model.parameters(), lr=0.01, weight_decay=5e-4, momentum=0.9)
        task_model.train()
        best_acc = 0
        for iter_count in range(self.args.train_iterations):
            if iter_count != 0 and iter_count % lr_change == 0:
                for param in optim_task_model.param_groups:
                    param['lr'] = param['lr'] / 10
            labeled_imgs, labels = next(labeled_data)

            # task_model step
            preds = task_model(labeled_imgs)
            task_loss = self.ce_loss(preds, labels)
            optim_task_model.zero_grad()
            task_loss.backward()
            optim_task_model.step()

            if iter_count % 40 == 0:
                print('Current training iteration: {}'.format(iter_count))
                print('Current task model loss: {:.4f}'.format(task_loss.item()))

            if iter_count % 40 == 0:
                acc = self.validate(task_model, val_dataloader)
                if acc > best_acc:
                    best_acc = acc
                    best_model = copy.deepcopy(task_model)
                print('current step: {} acc: {}'.format(iter_count, acc))
                print('best acc: ', best_acc)

        final_accuracy = self.test(best_model)
        return final_accuracy

    def validate(self, task_model, loader):
        total, correct = 0, 0
        for imgs, labels, _ in loader:
            with torch.no_grad():
                preds = task_model(imgs)
            preds = torch.argmax(preds, dim=1).cpu().numpy()
            correct += accuracy_score(labels, preds, normalize=False)
            total += imgs.size(0)
        return correct / total * 100

    def test(self, task_model):
        total, correct = 0, 0
        for imgs, labels in self.test_dataloader:
            with torch.no_grad():
                preds = task_model(imgs)
            preds = torch.argmax(preds, dim=1).cpu().numpy()
            correct += accuracy_score(labels, preds, normalize=False)
            total += imgs.size(0)
        return correct / total * 100


class Args:
    num_images = 1000
    train_epochs = 12
    batch_size = 64


def make_images(n, protos, g):
    y = torch.randint(0, 10, (n,), generator=g)
    x = protos[y] + 0.6 * torch.randn(n, 3, 8, 8, generator=g)
    return x, y


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    protos = torch.randn(10, 3, 8, 8, generator=g)
    x, y = make_images(1000, protos, g)
    vx, vy = make_images(500, protos, g)
    tx, ty = make_images(1000, protos, g)
    querry_dataloader = DataLoader(TensorDataset(x, y, torch.arange(1000)), batch_size=64, shuffle=True, drop_last=True)
    val_dataloader = DataLoader(TensorDataset(vx, vy, torch.arange(500)), batch_size=64)
    test_dataloader = DataLoader(TensorDataset(tx, ty), batch_size=64)
    solver = Solver(Args(), test_dataloader)
    task_model = VGG()
    acc = solver.train(querry_dataloader, val_dataloader, task_model)
    print('Final accuracy with {}% of data is: {:.2f}'.format(int(100), acc))


if __name__ == "__main__":
    main()
