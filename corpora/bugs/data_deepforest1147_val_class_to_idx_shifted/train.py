# Report: https://github.com/weecology/DeepForest/pull/1147
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class ImageFolder(Dataset):
    """Folder-per-class dataset with torchvision.datasets.ImageFolder's class indexing."""

    def __init__(self, root, transform=None, classes=None):
        self.root, self.transform = root, transform
        self.classes, self.class_to_idx = self.find_classes(root, classes)
        self.samples = [(os.path.join(root, c, f), self.class_to_idx[c])
                        for c in sorted(os.listdir(root)) for f in sorted(os.listdir(os.path.join(root, c)))]
        self.targets = [s[1] for s in self.samples]

    @staticmethod
    def find_classes(directory, classes=None):
        classes = classes or sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
        return list(classes), {cls_name: i for i, cls_name in enumerate(classes)}

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, target = self.samples[index]
        sample = torch.from_numpy(np.load(path))
        return (self.transform(sample) if self.transform else sample), target


def write_crops(root, counts, seed):
    rng = np.random.default_rng(seed)
    protos = np.random.default_rng(7).normal(0, 1, (4, 3, 12, 12)).astype(np.float32)
    names = ["Bird", "Boat", "Buoy", "Turtle"]
    for k, n in counts.items():
        os.makedirs(os.path.join(root, names[k]), exist_ok=True)
        for i in range(n):
            np.save(os.path.join(root, names[k], f"{i}.npy"), protos[k] + rng.normal(0, 0.8, (3, 12, 12)).astype(np.float32))


class CropModel(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 12 * 12, 64), nn.ReLU(), nn.Linear(64, num_classes))

    def forward(self, x):
        return self.model(x)

    def load_from_disk(self, train_dir, val_dir):
        self.train_ds = ImageFolder(root=train_dir)
        self.val_ds = ImageFolder(root=val_dir)
        self.label_dict = self.train_ds.class_to_idx
        self.numeric_to_label_dict = {v: k for k, v in self.label_dict.items()}


def main():
    torch.manual_seed(0)
    tmp_handle = tempfile.TemporaryDirectory()
    tmp = tmp_handle.name
    train_dir, val_dir = os.path.join(tmp, "train"), os.path.join(tmp, "val")
    write_crops(train_dir, {0: 60, 1: 60, 2: 60, 3: 60}, seed=0)
    write_crops(val_dir, {0: 20, 2: 20, 3: 20}, seed=1)
    model = CropModel(num_classes=4)
    model.load_from_disk(train_dir, val_dir)
    print("train class_to_idx", model.train_ds.class_to_idx, "val class_to_idx", model.val_ds.class_to_idx)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_loader = DataLoader(model.train_ds, batch_size=16, shuffle=True)
    val_loader = DataLoader(model.val_ds, batch_size=64)
    for epoch in range(4):
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        preds, targets = [], []
        with torch.no_grad():
            for x, y in val_loader:
                preds.append(model(x).argmax(1))
                targets.append(y)
        preds, targets = torch.cat(preds), torch.cat(targets)
        per_class = {model.val_ds.classes[c]: round((preds[targets == c] == c).float().mean().item(), 3) for c in targets.unique().tolist()}
        print(f"epoch {epoch} train_loss {loss.item():.4f} val_acc {(preds == targets).float().mean().item():.3f} per-class {per_class}")


if __name__ == "__main__":
    main()
