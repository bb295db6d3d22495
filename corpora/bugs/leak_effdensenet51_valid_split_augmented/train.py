# Source: gpleiss/efficient_densenet_pytorch, demo.py (transforms, train/valid split, train/test_epoch), before commit b0a156d87b736d90c3e27933e8e4d0114bd5ef36
# Report: https://github.com/gpleiss/efficient_densenet_pytorch/issues/51
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.sampler import SubsetRandomSampler


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


class RandomCrop:
    def __init__(self, size, padding=0):
        self.size, self.padding = size, padding

    def __call__(self, img):
        img = F.pad(img, [self.padding] * 4)
        i, j = torch.randint(0, img.shape[1] - self.size + 1, (2,)).tolist()
        return img[:, i:i + self.size, j:j + self.size]


class RandomHorizontalFlip:
    def __call__(self, img):
        return img.flip(-1) if torch.rand(()) < 0.5 else img


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = torch.tensor(mean)[:, None, None], torch.tensor(std)[:, None, None]

    def __call__(self, img):
        return (img - self.mean) / self.std


class CIFAR10(Dataset):
    """Synthetic 3x16x16 stand-in for torchvision.datasets.CIFAR10."""

    def __init__(self, root, train=True, transform=None, download=False):
        g = torch.Generator().manual_seed(0 if train else 1)
        n = 2000 if train else 500
        protos = torch.rand(10, 3, 6, 6, generator=torch.Generator().manual_seed(5))
        self.targets = torch.randint(0, 10, (n,), generator=g)
        self.data = 0.25 + 0.3 * torch.randn(n, 3, 16, 16, generator=g)
        offs = torch.randint(3, 7, (n, 2), generator=g)
        for k in range(n):
            r, c = offs[k].tolist()
            self.data[k, :, r:r + 6, c:c + 6] += protos[self.targets[k]]
        self.transform = transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        img = self.data[index]
        if self.transform is not None:
            img = self.transform(img)
        return img, self.targets[index]


class DenseNet(nn.Module):
    def __init__(self, growth_rate=8, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.classifier = nn.Linear(32, num_classes)

    def forward(self, x):
        out = F.adaptive_avg_pool2d(self.features(x), (1, 1)).flatten(1)
        return self.classifier(out)


def train_epoch(model, loader, optimizer, epoch, n_epochs):
    model.train()
    for input, target in loader:
        output = model(input)
        loss = F.cross_entropy(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def test_epoch(model, loader, is_test=True):
    model.eval()
    wrong, total = 0, 0
    with torch.no_grad():
        for input, target in loader:
            pred = model(input).argmax(1)
            wrong += (pred != target).sum().item()
            total += target.numel()
    return wrong / total


def train(model, train_set, test_set, valid_size=500, n_epochs=6, batch_size=64, seed=0):
    torch.manual_seed(seed)
    # Create train/valid split
    if valid_size:
        indices = torch.randperm(len(train_set))
        train_indices = indices[:len(indices) - valid_size]
        train_sampler = SubsetRandomSampler(train_indices)
        valid_indices = indices[len(indices) - valid_size:]
        valid_sampler = SubsetRandomSampler(valid_indices)

    # Data loaders
    train_loader = DataLoader(train_set, sampler=(train_sampler if valid_size else None), batch_size=batch_size, shuffle=(valid_size is None))
    test_loader = DataLoader(test_set, batch_size=batch_size, shuffle=False)
    valid_loader = DataLoader(train_set, sampler=valid_sampler, batch_size=batch_size)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.0001)
    best_error = 1
    for epoch in range(n_epochs):
        train_loss = train_epoch(model, train_loader, optimizer, epoch, n_epochs)
        valid_error = test_epoch(model, valid_loader, is_test=(not valid_loader))
        if valid_error < best_error:
            best_error = valid_error
            print('New best error: %.4f' % best_error)
        print('epoch %d train_loss %.4f valid_error %.4f' % (epoch + 1, train_loss, valid_error))
    print('Final valid error, measured twice: %.4f %.4f' % (test_epoch(model, valid_loader), test_epoch(model, valid_loader)))
    print('Final test error: %.4f' % test_epoch(model, test_loader))


def demo():
    torch.manual_seed(0)
    mean = [0.25, 0.25, 0.25]
    stdv = [0.3, 0.3, 0.3]
    train_transforms = Compose([
        RandomCrop(16, padding=4),
        RandomHorizontalFlip(),
        Normalize(mean=mean, std=stdv),
    ])
    test_transforms = Compose([
        Normalize(mean=mean, std=stdv),
    ])
    train_set = CIFAR10('data', train=True, transform=train_transforms, download=True)
    test_set = CIFAR10('data', train=False, transform=test_transforms, download=False)
    model = DenseNet()
    train(model=model, train_set=train_set, test_set=test_set)


if __name__ == "__main__":
    demo()
