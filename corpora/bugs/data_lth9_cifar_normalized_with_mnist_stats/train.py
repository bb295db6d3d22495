# Source: rahulvigneswaran/Lottery-Ticket-Hypothesis-in-Pytorch, main.py (main, train, test, make_mask, weight_init), archs/cifar10/fc1.py, commit 34a8c9678406a1c7dd0fec4c9f0d25d017be55fb
# Report: https://github.com/rahulvigneswaran/Lottery-Ticket-Hypothesis-in-Pytorch/issues/9
# Lottery-ticket experiments (main.py with --dataset cifar10 --arch_type fc1), here the first,
# unpruned level of the iterative pruning run. CIFAR-10 is replaced by
# synthetic 32x32 colour images (uint8, HWC, like the torchvision dataset), torchvision's
# ToTensor/Normalize/Compose are written out, pruning levels and plotting are dropped.
import argparse
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init
from torch.utils.data import DataLoader, Dataset


class ToTensor:
    def __call__(self, pic):
        return torch.from_numpy(pic).permute(2, 0, 1).float().div(255)


class Normalize:
    def __init__(self, mean, std):
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, tensor):
        return (tensor - self.mean) / self.std


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class SyntheticCIFAR10(Dataset):
    """Colour images whose class is set by a colour cast and a stripe orientation."""
    def __init__(self, train=True, transform=None):
        rng = np.random.RandomState(0 if train else 1)
        n = 2000 if train else 500
        yy, xx = np.mgrid[0:32, 0:32] / 32.0
        casts = np.random.RandomState(5).uniform(0.35, 0.65, size=(10, 3))
        self.targets = rng.randint(0, 10, size=n)
        self.data = np.zeros((n, 32, 32, 3), dtype=np.uint8)
        for k, c in enumerate(self.targets):
            angle = np.pi * c / 10
            stripes = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * (np.cos(angle) * xx + np.sin(angle) * yy) + rng.uniform(0, 6.3))
            img = casts[c][None, None, :] * 0.7 + 0.3 * stripes[..., None] + rng.normal(0, 0.12, size=(32, 32, 3))
            self.data[k] = np.clip(img * 255, 0, 255).astype(np.uint8)
        self.transform = transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        img = self.data[index]
        if self.transform is not None:
            img = self.transform(img)
        return img, int(self.targets[index])


class fc1(nn.Module):
    def __init__(self, num_classes=10):
        super(fc1, self).__init__()
        self.classifier = nn.Sequential(
            nn.Linear(3*32*32, 300),
            nn.ReLU(inplace=True),
            nn.Linear(300, 100),
            nn.ReLU(inplace=True),
            nn.Linear(100, num_classes),
        )

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.classifier(x)


def main(args, ITE=0):
    device = torch.device("cpu")

    # Data Loader
    transform = Compose([ToTensor(), Normalize((0.1307,), (0.3081,))])
    if args.dataset == "cifar10":
        traindataset = SyntheticCIFAR10(train=True, transform=transform)
        testdataset = SyntheticCIFAR10(train=False, transform=transform)
    else:
        print("\nWrong Dataset choice \n")
        exit()

    train_loader = DataLoader(traindataset, batch_size=args.batch_size, shuffle=True, num_workers=0, drop_last=False)
    test_loader = DataLoader(testdataset, batch_size=args.batch_size, shuffle=False, num_workers=0, drop_last=True)

    imgs, _ = next(iter(train_loader))
    print("input batch per-channel mean", [round(v, 3) for v in imgs.mean(dim=(0, 2, 3)).tolist()],
          "std", [round(v, 3) for v in imgs.std(dim=(0, 2, 3)).tolist()])

    model = fc1().to(device)
    model.apply(weight_init)
    initial_state_dict = copy.deepcopy(model.state_dict())
    make_mask(model)

    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-4)
    criterion = nn.CrossEntropyLoss()

    best_accuracy = 0
    for iter_ in range(args.end_iter):
        if iter_ % args.valid_freq == 0:
            accuracy = test(model, test_loader, criterion)
            if accuracy > best_accuracy:
                best_accuracy = accuracy
        loss = train(model, train_loader, optimizer, criterion)
        if iter_ % args.print_freq == 0:
            print(f'Train Epoch: {iter_}/{args.end_iter} Loss: {loss:.6f} Accuracy: {accuracy:.2f}% Best Accuracy: {best_accuracy:.2f}%')
    accuracy = test(model, test_loader, criterion)
    print(f'Final test accuracy: {accuracy:.2f}%')


def train(model, train_loader, optimizer, criterion):
    model.train()
    for batch_idx, (imgs, targets) in enumerate(train_loader):
        optimizer.zero_grad()
        output = model(imgs)
        train_loss = criterion(output, targets)
        train_loss.backward()
        optimizer.step()
    return train_loss.item()


def test(model, test_loader, criterion):
    model.eval()
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            pred = output.data.max(1, keepdim=True)[1]
            correct += pred.eq(target.data.view_as(pred)).sum().item()
        accuracy = 100. * correct / len(test_loader.dataset)
    return accuracy


def make_mask(model):
    global mask
    mask = [np.ones_like(param.data.cpu().numpy()) for name, param in model.named_parameters() if 'weight' in name]


def weight_init(m):
    if isinstance(m, nn.Linear):
        init.xavier_normal_(m.weight.data)
        init.normal_(m.bias.data)


if __name__ == "__main__":
    torch.manual_seed(0)
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", default=1.2e-3, type=float, help="Learning rate")
    parser.add_argument("--batch_size", default=60, type=int)
    parser.add_argument("--end_iter", default=8, type=int)
    parser.add_argument("--print_freq", default=1, type=int)
    parser.add_argument("--valid_freq", default=1, type=int)
    parser.add_argument("--dataset", default="cifar10", type=str)
    args = parser.parse_args([])
    main(args, ITE=0)
