"""Leaky splits, each named after its leak (and `Clean...` ones with none). Issue 6."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset, random_split

# The seed's example (appendix G.5): writer-a is in both splits.
WRITERS_TRAIN = ["writer-a", "writer-b"]
WRITERS_TEST = ["writer-a", "writer-c"]


def subsets_from_two_random_splits(n: int = 40):
    """random_split called twice with different seeds: train of one, test of the other."""
    ds = TensorDataset(torch.randn(n, 8), torch.randint(0, 2, (n,)))
    train, _ = random_split(ds, [0.75, 0.25], generator=torch.Generator().manual_seed(1))
    _, test = random_split(ds, [0.75, 0.25], generator=torch.Generator().manual_seed(2))
    return train, test


def clean_random_split(n: int = 40):
    ds = TensorDataset(torch.randn(n, 8), torch.randint(0, 2, (n,)))
    return random_split(ds, [0.75, 0.25], generator=torch.Generator().manual_seed(0))


class ImagesWithBrightenedCopies(Dataset):
    """Each image, and in `copies` a brightened, contrast-stretched, slightly noisy copy of it."""

    def __init__(self, base: torch.Tensor, copies: bool = False, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.images = base * 1.3 + 0.1 + 0.01 * torch.randn(base.shape, generator=g) if copies else base
        self.labels = torch.arange(len(base)) % 3

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return self.images[i], self.labels[i]


def smooth_images(n: int, seed: int) -> torch.Tensor:
    """Distinct smooth 3×32×32 images (random low-frequency patterns)."""
    g = torch.Generator().manual_seed(seed)
    low = torch.randn(n, 3, 4, 4, generator=g)
    return torch.nn.functional.interpolate(low, size=(32, 32), mode="bilinear", align_corners=False)


class ScalerFittedOnAllData:
    """A scikit-learn-style StandardScaler (mean_, scale_, var_) fitted before the split."""

    def fit(self, x: np.ndarray) -> ScalerFittedOnAllData:
        self.mean_ = x.mean(0)
        self.var_ = x.var(0)
        self.scale_ = np.sqrt(self.var_)
        return self


class Normalize:
    """torchvision.transforms.Normalize's shape: per-channel mean and std constants."""

    def __init__(self, mean, std) -> None:
        self.mean, self.std = list(mean), list(std)


def normalize_from_all_pixels(train: torch.Tensor, test: torch.Tensor) -> Normalize:
    """Channel statistics computed on train and test images together (after ToTensor's /255)."""
    allx = torch.cat([train, test]).float() / 255
    return Normalize(allx.mean(dim=(0, 2, 3)).tolist(), allx.std(dim=(0, 2, 3)).tolist())


TEXT_TRAIN = ["the cat sat on the mat", "dogs chase the red ball", "a bird sings at dawn"]
TEXT_TEST = ["an owl hoots at midnight", "the fish swims in the pond"]


def vocabulary_built_on_all_text() -> dict[str, int]:
    words = sorted({w for t in TEXT_TRAIN + TEXT_TEST for w in t.split()})
    return {w: i for i, w in enumerate(words)}


def vocabulary_built_on_train() -> dict[str, int]:
    words = sorted({w for t in TEXT_TRAIN for w in t.split()})
    return {"<unk>": 0, **{w: i + 1 for i, w in enumerate(words)}}
