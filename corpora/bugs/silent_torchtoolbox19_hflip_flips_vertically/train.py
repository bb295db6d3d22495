# Source: PistonY/torch-toolbox, torchtoolbox/transform/functional.py (hflip, to_tensor), torchtoolbox/transform/transforms.py (Compose, RandomHorizontalFlip, ToTensor), commit 17aaa513ef72dbac8af88977ff11840aa2d6a2f4
# Report: https://github.com/PistonY/torch-toolbox/issues/19
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class cv2:
    """The two OpenCV calls the transforms use (flipCode 0: around the x-axis, 1: around the y-axis)."""

    @staticmethod
    def flip(src, flipCode):
        if flipCode == 0:
            return np.ascontiguousarray(src[::-1])
        if flipCode > 0:
            return np.ascontiguousarray(src[:, ::-1])
        return np.ascontiguousarray(src[::-1, ::-1])


# ---------------------------------------------------------------- torchtoolbox.transform.functional
def _is_numpy_image(img):
    return isinstance(img, np.ndarray) and (img.ndim in {2, 3})


def to_tensor(pic):
    if not _is_numpy_image(pic):
        raise TypeError('pic should be CV Image or ndarray. Got {}'.format(type(pic)))
    if pic.ndim == 2:
        pic = pic[:, :, None]
    img = torch.from_numpy(pic.transpose((2, 0, 1)).copy())
    if isinstance(img, torch.ByteTensor):
        return img.float().div(255)
    return img


def hflip(img):
    """Horizontally flip the given CV Image.

    Args:
        img (CV Image): Image to be flipped.

    Returns:
        CV Image:  Horizontall flipped image.
    """
    if not _is_numpy_image(img):
        raise TypeError('img should be CV Image. Got {}'.format(type(img)))

    return cv2.flip(img, 0)


def vflip(img):
    """Vertically flip the given CV Image.

    Args:
        img (CV Image): Image to be flipped.

    Returns:
        CV Image:  Vertically flipped image.
    """
    if not _is_numpy_image(img):
        raise TypeError('img should be CV Image. Got {}'.format(type(img)))

    return cv2.flip(img, 1)


# ---------------------------------------------------------------- torchtoolbox.transform.transforms
class Compose(object):
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


class ToTensor(object):
    def __call__(self, pic):
        return to_tensor(pic)


class RandomHorizontalFlip(object):
    """Horizontally flip the given CV Image randomly with a given probability.

    Args:
        p (float): probability of the image being flipped. Default value is 0.5
    """
    def __init__(self, p=0.5):
        self.p = p

    def __call__(self, img):
        if random.random() < self.p:
            return hflip(img)
        return img


# ---------------------------------------------------------------- user training script
def draw(label, rng):
    # 24x24 uint8 road signs: 0 = bar near the top, 1 = bar near the bottom, 2 = vertical bar,
    # 3 = bar across the middle
    img = rng.normal(60, 25, (24, 24, 3))
    if label == 0:
        img[3:7, 4:20] += 140
    elif label == 1:
        img[17:21, 4:20] += 140
    elif label == 2:
        img[3:21, 10:14] += 140
    else:
        img[10:14, 4:20] += 140
    shift = rng.randint(-2, 3)
    img = np.roll(img, shift, axis=1)
    return np.clip(img, 0, 255).astype(np.uint8)


class SignDataset(Dataset):
    def __init__(self, n, seed, transform):
        rng = np.random.RandomState(seed)
        self.labels = rng.randint(0, 4, n)
        self.images = [draw(int(y), rng) for y in self.labels]
        self.transform = transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return self.transform(self.images[idx]), int(self.labels[idx])


def evaluate(model, loader):
    model.eval()
    correct = torch.zeros(4)
    total = torch.zeros(4)
    with torch.no_grad():
        for x, y in loader:
            pred = model(x).argmax(1)
            for c in range(4):
                total[c] += (y == c).sum()
                correct[c] += ((pred == y) & (y == c)).sum()
    model.train()
    return (correct / total).tolist()


def main():
    random.seed(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    train_transform = Compose([
        RandomHorizontalFlip(),
        ToTensor(),
    ])
    val_transform = Compose([
        ToTensor(),
    ])
    train_loader = DataLoader(SignDataset(800, 0, train_transform), batch_size=32, shuffle=True)
    val_loader = DataLoader(SignDataset(400, 1, val_transform), batch_size=100, shuffle=False)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(32 * 6 * 6, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(6):
        losses = []
        for x, y in train_loader:
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        acc = evaluate(model, val_loader)
        print(f"epoch {epoch}: train loss {np.mean(losses):.4f} | val accuracy per class "
              f"top-bar {acc[0]:.3f} bottom-bar {acc[1]:.3f} vertical-bar {acc[2]:.3f} middle-bar {acc[3]:.3f} "
              f"(mean {np.mean(acc):.3f})")


if __name__ == '__main__':
    main()
