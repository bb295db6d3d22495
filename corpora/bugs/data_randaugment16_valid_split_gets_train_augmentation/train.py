# Source: ildoonet/pytorch-randaugment, RandAugment/data.py (get_dataloaders, CutoutDefault, SubsetSampler), RandAugment/augmentations.py, RandAugment/train.py, commit 48b8f509c4bbda93bbe733d98b3fd052b6e4c8ae
# Report: https://github.com/ildoonet/pytorch-randaugment/issues/16
import random

import numpy as np
import torch
import torch.nn as nn
from sklearn.model_selection import StratifiedShuffleSplit
from torch.utils.data import Dataset, Sampler, SubsetRandomSampler

C = {'dataset': 'cifar10', 'aug': 'randaugment', 'randaug': {'N': 2, 'M': 14}, 'cutout': 8, 'batch': 64, 'epoch': 6}
_CIFAR_MEAN, _CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)


# ---------------------------------------------------------------- transforms (tensor versions of the torchvision ones)
class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


class RandomCrop:
    def __init__(self, size, padding):
        self.size, self.padding = size, padding

    def __call__(self, img):
        img = nn.functional.pad(img, [self.padding] * 4)
        i, j = random.randint(0, 2 * self.padding), random.randint(0, 2 * self.padding)
        return img[:, i:i + self.size, j:j + self.size]


class RandomHorizontalFlip:
    def __call__(self, img):
        return img.flip(-1) if random.random() < 0.5 else img


class ToTensor:
    def __call__(self, img):
        return img.clone()


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = torch.tensor(mean)[:, None, None], torch.tensor(std)[:, None, None]

    def __call__(self, img):
        return (img - self.mean) / self.std


def _rotate(img, v):
    return torch.rot90(img, 1 if v > 0 else 3, (1, 2)) if abs(v) > 20 else img


def _translate_x(img, v):
    return torch.roll(img, int(v * img.shape[2]), 2)


def _translate_y(img, v):
    return torch.roll(img, int(v * img.shape[1]), 1)


def _contrast(img, v):
    mean = img.mean()
    return ((img - mean) * v + mean).clamp(0, 1)


def _brightness(img, v):
    return (img * v).clamp(0, 1)


def _solarize(img, v):
    return torch.where(img < v, img, 1 - img)


def _posterize(img, v):
    return torch.floor(img * v) / v


def augment_list():
    return [(_rotate, 0, 30), (_translate_x, 0., 0.45), (_translate_y, 0., 0.45), (_contrast, 0.1, 1.9),
            (_brightness, 0.1, 1.9), (_solarize, 1.0, 0.0), (_posterize, 16, 2)]


class RandAugment:
    def __init__(self, n, m):
        self.n = n
        self.m = m      # [0, 30]
        self.augment_list = augment_list()

    def __call__(self, img):
        ops = random.choices(self.augment_list, k=self.n)
        for op, minval, maxval in ops:
            val = (float(self.m) / 30) * float(maxval - minval) + minval
            if op in (_translate_x, _translate_y, _rotate) and random.random() < 0.5:
                val = -val
            img = op(img, val)
        return img


class CutoutDefault(object):
    def __init__(self, length):
        self.length = length

    def __call__(self, img):
        h, w = img.size(1), img.size(2)
        mask = np.ones((h, w), np.float32)
        y = np.random.randint(h)
        x = np.random.randint(w)
        y1 = np.clip(y - self.length // 2, 0, h)
        y2 = np.clip(y + self.length // 2, 0, h)
        x1 = np.clip(x - self.length // 2, 0, w)
        x2 = np.clip(x + self.length // 2, 0, w)
        mask[y1: y2, x1: x2] = 0.
        mask = torch.from_numpy(mask)
        mask = mask.expand_as(img)
        img *= mask
        return img


# ---------------------------------------------------------------- data
class SyntheticCIFAR(Dataset):
    """CIFAR-shaped stand-in: 10 classes, 3x32x32 images in [0, 1]."""

    def __init__(self, train, transform):
        rng = np.random.RandomState(0)
        protos = rng.uniform(0.1, 0.9, (10, 3, 8, 8))
        rng = np.random.RandomState(1 if train else 2)
        n = 2000 if train else 500
        self.targets = rng.randint(0, 10, n).tolist()
        base = np.kron(protos[self.targets], np.ones((1, 1, 4, 4)))
        self.data = np.clip(base + rng.normal(0, 0.15, base.shape), 0, 1).astype(np.float32)
        self.transform = transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, idx):
        return self.transform(torch.from_numpy(self.data[idx])), self.targets[idx]


class SubsetSampler(Sampler):
    r"""Samples elements from a given list of indices, without replacement."""

    def __init__(self, indices):
        self.indices = indices

    def __iter__(self):
        return (i for i in self.indices)

    def __len__(self):
        return len(self.indices)


def get_dataloaders(dataset, batch, dataroot, split=0.15, split_idx=0):
    if 'cifar' in dataset or 'svhn' in dataset:
        transform_train = Compose([
            RandomCrop(32, padding=4),
            RandomHorizontalFlip(),
            ToTensor(),
            Normalize(_CIFAR_MEAN, _CIFAR_STD),
        ])
        transform_test = Compose([
            ToTensor(),
            Normalize(_CIFAR_MEAN, _CIFAR_STD),
        ])
    else:
        raise ValueError('dataset=%s' % dataset)

    if C['aug'] == 'randaugment':
        transform_train.transforms.insert(0, RandAugment(C['randaug']['N'], C['randaug']['M']))
    elif C['aug'] in ['default', 'inception', 'inception320']:
        pass
    else:
        raise ValueError('not found augmentations. %s' % C['aug'])

    if C['cutout'] > 0:
        transform_train.transforms.append(CutoutDefault(C['cutout']))

    if dataset == 'cifar10':
        total_trainset = SyntheticCIFAR(train=True, transform=transform_train)
        testset = SyntheticCIFAR(train=False, transform=transform_test)
    else:
        raise ValueError('invalid dataset name=%s' % dataset)

    train_sampler = None
    if split > 0.0:
        sss = StratifiedShuffleSplit(n_splits=5, test_size=split, random_state=0)
        sss = sss.split(list(range(len(total_trainset))), total_trainset.targets)
        for _ in range(split_idx + 1):
            train_idx, valid_idx = next(sss)

        train_sampler = SubsetRandomSampler(train_idx)
        valid_sampler = SubsetSampler(valid_idx)
    else:
        valid_sampler = SubsetSampler([])

    trainloader = torch.utils.data.DataLoader(
        total_trainset, batch_size=batch, shuffle=True if train_sampler is None else False, num_workers=0,
        sampler=train_sampler, drop_last=True)
    validloader = torch.utils.data.DataLoader(
        total_trainset, batch_size=batch, shuffle=False, num_workers=0,
        sampler=valid_sampler, drop_last=False)

    testloader = torch.utils.data.DataLoader(
        testset, batch_size=batch, shuffle=False, num_workers=0,
        drop_last=False
    )
    return train_sampler, trainloader, validloader, testloader


# ---------------------------------------------------------------- train.py
def run_epoch(model, loader, loss_fn, optimizer):
    total, correct, loss_sum = 0, 0, 0.0
    for data, label in loader:
        preds = model(data)
        loss = loss_fn(preds, label)
        if optimizer:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        loss_sum += loss.item() * len(data)
        correct += (preds.argmax(1) == label).sum().item()
        total += len(data)
    return {'loss': loss_sum / total, 'top1': correct / total}


def train_and_eval(test_ratio=0.15, cv_fold=0, metric='valid'):
    trainsampler, trainloader, validloader, testloader_ = get_dataloaders(C['dataset'], C['batch'], None, test_ratio, split_idx=cv_fold)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
    best_top1, best_epoch = 0, -1
    for epoch in range(C['epoch']):
        model.train()
        rs = {'train': run_epoch(model, trainloader, criterion, optimizer)}
        model.eval()
        with torch.no_grad():
            rs['valid'] = run_epoch(model, validloader, criterion, None)
            rs['test'] = run_epoch(model, testloader_, criterion, None)
        if rs[metric]['top1'] > best_top1:
            best_top1, best_epoch = rs[metric]['top1'], epoch
        print(f"epoch {epoch}: train loss {rs['train']['loss']:.4f} top1 {rs['train']['top1']:.3f} | "
              f"valid loss {rs['valid']['loss']:.4f} top1 {rs['valid']['top1']:.3f} | "
              f"test loss {rs['test']['loss']:.4f} top1 {rs['test']['top1']:.3f}")
    print(f"best valid top1 {best_top1:.3f} at epoch {best_epoch}")


if __name__ == '__main__':
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    train_and_eval()
