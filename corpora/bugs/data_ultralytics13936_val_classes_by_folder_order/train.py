# Report: https://github.com/ultralytics/ultralytics/issues/13936
# Fix: https://github.com/ultralytics/ultralytics/pull/26192
# YOLOv8-cls style training of an image-rotation classifier (classes "0", "90", "180", "270") from a
# dataset laid out as train/<class>/ and test/<class>/ folders, each read by ClassificationDataset
# through an ImageFolder-style scan. Synthetic images (16x16 oriented patterns) are written to a
# temporary directory; the test set sampled for this run happens to contain no "180" images.
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ImageFolder:
    """The class scan of torchvision.datasets.ImageFolder (find_classes + make_dataset), .npy images."""

    def __init__(self, root):
        self.root = root
        self.classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
        self.class_to_idx = {cls_name: i for i, cls_name in enumerate(self.classes)}
        self.samples = []
        for target_class in sorted(self.class_to_idx.keys()):
            class_index = self.class_to_idx[target_class]
            target_dir = os.path.join(root, target_class)
            for fname in sorted(os.listdir(target_dir)):
                self.samples.append((os.path.join(target_dir, fname), class_index))


class ClassificationDataset(torch.utils.data.Dataset):
    def __init__(self, root):
        self.base = ImageFolder(root=root)
        self.samples = self.base.samples
        self.root = self.base.root

    def __getitem__(self, i):
        f, j = self.samples[i]
        im = torch.from_numpy(np.load(f))
        return {"img": im[None], "cls": j}

    def __len__(self) -> int:
        return len(self.samples)


def write_split(root, split, per_class, rotations, rng):
    base = rng.normal(size=(16, 16)).astype(np.float32)
    base[:8, :4] += 3.0
    for rot in rotations:
        os.makedirs(os.path.join(root, split, str(rot)), exist_ok=True)
        for k in range(per_class):
            img = np.rot90(base, k=rot // 90) + rng.normal(scale=0.8, size=(16, 16))
            np.save(os.path.join(root, split, str(rot), f"{k:04d}.npy"), img.astype(np.float32))


class ClassificationModel(nn.Module):
    def __init__(self, nc):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.SiLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(16, 32, 3, padding=1), nn.SiLU(), nn.MaxPool2d(2))
        self.linear = nn.Linear(32 * 16, nc)

    def forward(self, x):
        return self.linear(self.conv(x).flatten(1))


@torch.no_grad()
def validate(model, loader):
    correct = total = 0
    for batch in loader:
        pred = model(batch["img"]).argmax(1)
        correct += (pred == batch["cls"]).sum().item()
        total += len(pred)
    return correct / total


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as data:
        write_split(data, "train", 100, [0, 90, 180, 270], rng)
        write_split(data, "test", 20, [0, 90, 270], rng)
        names = dict(enumerate(sorted(os.listdir(os.path.join(data, "train")))))
        trainset = ClassificationDataset(root=os.path.join(data, "train"))
        testset = ClassificationDataset(root=os.path.join(data, "test"))
        print(f"train: found {len(trainset)} images in {len(trainset.base.classes)} classes, names {names}")
        print(f"test: found {len(testset)} images in {len(testset.base.classes)} classes")
        train_loader = torch.utils.data.DataLoader(trainset, batch_size=32, shuffle=True)
        test_loader = torch.utils.data.DataLoader(testset, batch_size=64)

        model = ClassificationModel(nc=len(names))
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
        for epoch in range(5):
            for batch in train_loader:
                loss = F.cross_entropy(model(batch["img"]), batch["cls"])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            print(f"epoch {epoch} loss {loss.item():.4f} train top1 {validate(model, train_loader):.3f} "
                  f"test top1 {validate(model, test_loader):.3f}")


if __name__ == "__main__":
    main()
