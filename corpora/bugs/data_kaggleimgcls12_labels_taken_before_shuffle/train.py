# Source: Borda/kaggle_image-classify, kaggle_plantpatho/data.py (PlantPathologyDataset), before PR #12
# Report: https://github.com/Borda/kaggle_image-classify/pull/12
import itertools
from typing import Tuple, Union

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

LABELS = ("healthy", "scab", "rust", "frog_eye_leaf_spot")


def make_table_and_images(n=480, seed=0):
    patterns = np.random.default_rng(123).normal(0, 1, (len(LABELS), 3, 16, 16)).astype(np.float32)
    rng = np.random.default_rng(seed)
    rows, images = [], {}
    for i in range(n):
        lb = int(rng.integers(len(LABELS)))
        name = f"{i:06x}.jpg"
        images[name] = patterns[lb] + rng.normal(0, 1.0, (3, 16, 16)).astype(np.float32)
        rows.append({"image": name, "labels": LABELS[lb]})
    return pd.DataFrame(rows), images


class PlantPathologyDataset(Dataset):
    def __init__(
        self,
        df_data: Union[str, pd.DataFrame],
        images: dict,
        transforms=None,
        mode: str = 'train',
        split: float = 0.8,
        uq_labels: Tuple[str] = None,
        random_state=42,
    ):
        self.images = images
        self.transforms = transforms
        self.mode = mode
        self.data = df_data

        # take over existing table or load from file
        self.raw_labels = list(self.data['labels'])
        if uq_labels:
            self.labels_unique = tuple(uq_labels)
        else:
            labels_all = list(itertools.chain(*[lbs.split(" ") for lbs in self.raw_labels]))
            self.labels_unique = tuple(sorted(set(labels_all)))
        self.labels_lut = {lb: i for i, lb in enumerate(self.labels_unique)}
        self.num_classes = len(self.labels_unique)
        # shuffle data
        self.data = self.data.sample(frac=1, random_state=random_state).reset_index(drop=True)

        # split dataset
        assert 0.0 <= split <= 1.0, f"split {split} is out of range"
        frac = int(split * len(self.data))
        self.data = self.data[:frac] if mode == 'train' else self.data[frac:]
        self.img_names = list(self.data['image'])
        self.labels = self._prepare_labels()

    def _prepare_labels(self) -> list:
        return [self.labels_lut[lb] for lb in self.raw_labels]

    def __getitem__(self, idx: int) -> tuple:
        img_name = self.img_names[idx]
        img = torch.from_numpy(self.images[img_name])
        label = self.labels[idx]
        if self.transforms:
            img = self.transforms(img)
        return img, label

    def __len__(self) -> int:
        return len(self.data)


def main():
    torch.manual_seed(0)
    table, images = make_table_and_images()
    test_table, test_images = make_table_and_images(n=200, seed=1)
    train_dataset = PlantPathologyDataset(table, images, mode='train', split=1.0)
    loader = DataLoader(train_dataset, batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 64), nn.ReLU(), nn.Linear(64, train_dataset.num_classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(6):
        correct = total = 0
        for imgs, labels in loader:
            logits = model(imgs)
            loss = F.cross_entropy(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            correct += (logits.argmax(1) == labels).sum().item()
            total += len(labels)
        with torch.no_grad():
            test_x = torch.from_numpy(np.stack([test_images[n] for n in test_table.image]))
            test_y = torch.tensor([train_dataset.labels_lut[lb] for lb in test_table.labels])
            test_acc = (model(test_x).argmax(1) == test_y).float().mean().item()
        print(f"epoch {epoch} train_loss {loss.item():.4f} train_acc {correct / total:.3f} held-out acc {test_acc:.3f}")


if __name__ == "__main__":
    main()
