# Source: PhoenixDL/rising, rising/transforms/abstract.py (AbstractTransform, BaseTransform), rising/transforms/crop.py (RandomCrop, CenterCrop), rising/transforms/functional/crop.py (crop, center_crop, random_crop), rising/transforms/compose.py (Compose), commit 71cb42f6ab471b32f042ae70168891c236f50ced
# Report: https://github.com/PhoenixDL/rising/issues/99
# Medical image segmentation with rising's batch transforms on the GPU-style data dicts
# ({'data': images, 'label': masks}): a Compose of RandomCrop(keys=('data', 'label')) feeds a
# small encoder-decoder trained with cross-entropy + soft Dice; validation runs on whole
# images and reports the foreground Dice. The MedNIST / decathlon volumes are replaced by
# synthetic 2D scans (an organ-like ellipse with a brighter lesion on textured background),
# rising.random samplers by fixed values.
import random
import time
from typing import Any, Sequence, Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def check_scalar(x):
    if isinstance(x, (int, float)):
        return True
    return isinstance(x, torch.Tensor) and x.numel() == 1


class AbstractTransform(torch.nn.Module):
    """Base class for all transforms"""

    def __init__(self, grad: bool = False, **kwargs):
        super().__init__()
        self.grad = grad
        self._registered_samplers = []
        for key, item in kwargs.items():
            setattr(self, key, item)

    def register_sampler(self, name: str, sampler):
        # constant samplers only (rising.random.DiscreteParameter([value]))
        self._registered_samplers.append(name)
        setattr(self, name, sampler)

    def __call__(self, *args, **kwargs) -> Any:
        if self.grad:
            context = torch.enable_grad()
        else:
            context = torch.no_grad()

        with context:
            return super().__call__(*args, **kwargs)

    def forward(self, **data) -> dict:
        raise NotImplementedError


class BaseTransform(AbstractTransform):
    """Transform to apply a functional interface to given keys"""

    def __init__(self, augment_fn, *args,
                 keys: Sequence = ('data',), grad: bool = False,
                 property_names: Sequence[str] = (), **kwargs):
        sampler_vals = [kwargs.pop(name) for name in property_names]
        super().__init__(grad=grad, **kwargs)
        self.augment_fn = augment_fn
        self.keys = keys
        self.property_names = property_names
        self.args = args
        self.kwargs = kwargs
        for name, val in zip(property_names, sampler_vals):
            self.register_sampler(name, val)

    def forward(self, **data) -> dict:
        kwargs = {}
        for k in self.property_names:
            kwargs[k] = getattr(self, k)

        kwargs.update(self.kwargs)

        for _key in self.keys:
            data[_key] = self.augment_fn(data[_key], *self.args, **kwargs)
        return data


def crop(data: torch.Tensor, corner: Sequence[int], size: Sequence[int]) -> torch.Tensor:
    _slices = []
    if len(corner) < data.ndim:
        for i in range(data.ndim - len(corner)):
            _slices.append(slice(0, data.shape[i]))

    _slices = _slices + [slice(c, c + s) for c, s in zip(corner, size)]
    return data[tuple(_slices)]


def center_crop(data: torch.Tensor, size: Union[int, Sequence[int]]) -> torch.Tensor:
    if check_scalar(size):
        size = [size] * (data.ndim - 2)
    if not isinstance(size[0], int):
        size = [int(s) for s in size]

    corner = [int(round((img_dim - crop_dim) / 2.)) for img_dim, crop_dim in zip(data.shape[2:], size)]
    return crop(data, corner, size)


def random_crop(data: torch.Tensor, size: Union[int, Sequence[int]],
                dist: Union[int, Sequence[int]] = 0) -> torch.Tensor:
    if check_scalar(dist):
        dist = [dist] * (data.ndim - 2)
    if check_scalar(size):
        size = [size] * (data.ndim - 2)
    if not isinstance(size[0], int):
        size = [int(s) for s in size]

    if any([crop_dim + dist_dim >= img_dim for img_dim, crop_dim, dist_dim in zip(data.shape[2:], size, dist)]):
        raise TypeError(f"Crop can not be realized with given size {size} and dist {dist}.")

    corner = [random.randrange(0, img_dim - crop_dim - dist_dim) for
              img_dim, crop_dim, dist_dim in zip(data.shape[2:], size, dist)]
    return crop(data, corner, size)


class CenterCrop(BaseTransform):
    def __init__(self, size, keys: Sequence = ('data',), grad: bool = False, **kwargs):
        super().__init__(augment_fn=center_crop, keys=keys,
                         grad=grad, property_names=('size', ), size=size,
                         **kwargs)


class RandomCrop(BaseTransform):
    def __init__(self, size, dist=0, keys: Sequence = ('data',), grad: bool = False, **kwargs):
        super().__init__(augment_fn=random_crop,
                         keys=keys, size=size, dist=dist, grad=grad,
                         property_names=('size', 'dist'), **kwargs)


class Compose(AbstractTransform):
    def __init__(self, *transforms):
        super().__init__(grad=True)
        if len(transforms) == 1 and isinstance(transforms[0], (list, tuple)):
            transforms = transforms[0]
        self.transforms = nn.ModuleList(transforms)

    def forward(self, **data) -> dict:
        for trafo in self.transforms:
            data = trafo(**data)
        return data


class SegNet(nn.Module):
    def __init__(self, in_ch=1, n_classes=2, width=16):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(in_ch, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU())
        self.enc2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(width, 2 * width, 3, padding=1),
                                  nn.BatchNorm2d(2 * width), nn.ReLU())
        self.up = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.dec = nn.Sequential(nn.Conv2d(2 * width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                                 nn.Conv2d(width, n_classes, 1))

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        return self.dec(torch.cat([e1, self.up(e2)], dim=1))


def soft_dice_loss(logits, target, eps=1e-5):
    probs = logits.softmax(dim=1)[:, 1]
    target = target.float()
    inter = (probs * target).sum(dim=(1, 2))
    denom = probs.sum(dim=(1, 2)) + target.sum(dim=(1, 2))
    return (1 - (2 * inter + eps) / (denom + eps)).mean()


def dice_score(pred, target, eps=1e-5):
    inter = ((pred == 1) & (target == 1)).sum().item()
    return (2 * inter + eps) / ((pred == 1).sum().item() + (target == 1).sum().item() + eps)


def make_scans(n, size=48, seed=0):
    """Synthetic 2D scans: textured background, an organ-like ellipse and (label 1) a brighter
    lesion inside it at a random position."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
    images, labels = [], []
    for _ in range(n):
        cy, cx = (torch.rand(2, generator=g) * 16 + 16).tolist()
        organ = (((yy - cy) / 14) ** 2 + ((xx - cx) / 10) ** 2) < 1
        ly = cy + (torch.rand(1, generator=g).item() - 0.5) * 12
        lx = cx + (torch.rand(1, generator=g).item() - 0.5) * 8
        r = 3 + 3 * torch.rand(1, generator=g).item()
        lesion = (((yy - ly) ** 2 + (xx - lx) ** 2) < r ** 2) & organ
        img = 0.3 * torch.randn(size, size, generator=g) + 0.6 * organ.float() + 0.8 * lesion.float()
        images.append(img[None])
        labels.append(lesion.long()[None])
    return torch.stack(images), torch.stack(labels)


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    train_x, train_y = make_scans(256, seed=1)
    val_x, val_y = make_scans(96, seed=2)

    batch_transforms = Compose([
        RandomCrop(size=32, keys=('data', 'label')),
    ])

    model = SegNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    batch_size = 16
    for epoch in range(1, 9):
        model.train()
        perm = torch.randperm(len(train_x))
        total = 0.0
        for i in range(0, len(train_x), batch_size):
            idx = perm[i:i + batch_size]
            batch = batch_transforms(data=train_x[idx], label=train_y[idx])
            logits = model(batch['data'])
            target = batch['label'][:, 0]
            loss = F.cross_entropy(logits, target) + soft_dice_loss(logits, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)

        model.eval()
        with torch.no_grad():
            pred = model(val_x).argmax(dim=1)
            dice = dice_score(pred, val_y[:, 0])
            acc = (pred == val_y[:, 0]).float().mean().item()
        print("epoch %d train_loss %.4f val_dice %.4f val_pixel_acc %.4f" % (epoch, total / len(train_x), dice, acc))


if __name__ == "__main__":
    start = time.time()
    main()
    print("done in %.1fs" % (time.time() - start))
