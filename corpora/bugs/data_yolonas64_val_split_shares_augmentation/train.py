# Source: CondadosAI/modern-yolonas, src/modern_yolonas/cli/distill_cmd.py, src/modern_yolonas/training/distill.py, commit d78f620d4ca498282d8021061482ca32beee6f88
# Report: https://github.com/CondadosAI/modern-yolonas/pull/64
# Backbone distillation from cached teacher patch features: the student backbone plus a 1x1
# projection is trained to match the teacher's per-cell features (loss = 1 - cosine), with
# photometric jitter and a horizontal flip that reads a separately cached (flipped) feature grid.
# COCO images and the DINOv3 cache are replaced by synthetic 32x32 images and a fixed random conv
# teacher whose features are cached for the plain and the flipped image; the YOLO-NAS backbone is a
# small conv stack; the Lightning Trainer is replaced by a minimal loop that calls the module hooks.
import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, random_split


class HSVAugment:
    """Photometric jitter: hue/saturation/value gains, applied with probability p."""

    def __init__(self, p=0.5, hgain=0.015, sgain=0.7, vgain=0.6):
        self.p, self.gains = p, np.array([hgain, sgain, vgain])

    def __call__(self, image, labels):
        if np.random.random() >= self.p:
            return image, labels
        r = np.random.uniform(-1, 1, 3) * self.gains + 1
        img = image.astype(np.float32)
        gray = img.mean(axis=2, keepdims=True)
        img = gray + (img - gray) * r[1]
        img = img * r[2]
        img = np.roll(img, 1 if r[0] > 1 else 0, axis=2) * 0.1 + img * 0.9
        return np.clip(img, 0, 255).astype(np.uint8), labels


def build_cache(n=200, size=32, grid=8, dim=16, seed=0):
    """Images and the teacher's features for the plain and the mirrored image (the --with-flip cache)."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    images = []
    for _ in range(n):
        canvas = np.full((size, size, 3), 114, np.float32)
        for _ in range(rng.randint(1, 4)):
            cy, cx, r = rng.randint(4, size - 4), rng.randint(4, size - 4), rng.randint(3, 8)
            colour = rng.randint(0, 255, 3)
            inside = (yy - cy) ** 2 + ((xx - cx) * rng.uniform(0.5, 1.5)) ** 2 < r ** 2
            canvas[inside] = colour
        canvas += rng.randn(size, size, 3) * 6
        images.append(np.clip(canvas, 0, 255).astype(np.uint8))
    torch.manual_seed(seed)
    teacher = nn.Sequential(
        nn.Conv2d(3, 32, 4, stride=4), nn.GELU(), nn.Conv2d(32, dim, 1))
    pos = torch.randn(1, dim, grid, grid) * 0.5     # positional embedding: not flip-equivariant
    feats, feats_flip = [], []
    with torch.no_grad():
        for image in images:
            for flipped, store in ((False, feats), (True, feats_flip)):
                im = image[:, ::-1] if flipped else image
                x = torch.from_numpy(np.ascontiguousarray(im[:, :, ::-1].transpose(2, 0, 1))).float()[None] / 255
                store.append((teacher(x) + pos)[0].numpy())
    return images, np.stack(feats), np.stack(feats_flip)


class CachedFeatureDataset(Dataset):
    """Images paired with their precomputed teacher features."""

    def __init__(self, cache, flip_prob: float = 0.5, hsv_prob: float = 0.5):
        self.images, self.features, self.features_flip = cache
        self.grid = self.features.shape[-1]
        self.dim = self.features.shape[1]
        self.has_flip = True
        self.flip_prob = flip_prob
        self._hsv = HSVAugment(p=hsv_prob)

    def __len__(self) -> int:
        return len(self.images)

    def _features(self, index: int, flipped: bool) -> np.ndarray:
        return (self.features_flip if flipped else self.features)[index]

    def __getitem__(self, index: int):
        canvas = self.images[index]
        empty = np.zeros((0, 5), np.float32)
        canvas, _ = self._hsv(canvas, empty)

        flipped = np.random.random() < self.flip_prob
        if flipped:
            canvas = canvas[:, ::-1]
        # A separate cached forward, never a mirrored grid.
        features = self._features(index, flipped)

        image_chw = np.ascontiguousarray(canvas[:, :, ::-1].transpose(2, 0, 1))
        return image_chw, np.ascontiguousarray(features)


def distill_collate_fn(batch):
    images, features = zip(*batch)
    return torch.from_numpy(np.stack(images)), torch.from_numpy(np.stack(features))


class Backbone(nn.Module):
    def __init__(self, width=24):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, stride=2, padding=1), nn.BatchNorm2d(width), nn.ReLU())
        self.stage = nn.Sequential(nn.Conv2d(width, width * 2, 3, stride=2, padding=1), nn.BatchNorm2d(width * 2), nn.ReLU(),
                                   nn.Conv2d(width * 2, width * 2, 3, padding=1), nn.BatchNorm2d(width * 2), nn.ReLU())
        self.pos = nn.Parameter(torch.zeros(1, width * 2, 8, 8))
        self.out_channels = [width, width, width * 2, width * 2]

    def forward(self, x):
        c2 = self.stem(x)
        c4 = self.stage(c2) + self.pos
        return c2, c2, c4, c4


class BackboneDistillModule(nn.Module):
    """Train the backbone to reproduce the teacher's patch features."""

    def __init__(self, backbone, teacher_dim=16, lr=3e-3, weight_decay=0.05):
        super().__init__()
        self.backbone = backbone
        self.projection = nn.Conv2d(backbone.out_channels[2], teacher_dim, 1)
        self.lr = lr
        self.weight_decay = weight_decay
        self.logged = {}

    def log(self, name, value):
        self.logged.setdefault(name, []).append(float(value))

    def on_after_batch_transfer(self, batch, dataloader_idx):
        images, features = batch
        if images.dtype == torch.uint8:
            images = images.float().div_(255.0)
        return images, features

    def _step(self, batch, stage: str) -> Tensor:
        images, target = batch
        _, _, c4, _ = self.backbone(images)
        predicted = self.projection(c4)

        similarity = nn.functional.cosine_similarity(predicted, target, dim=1).mean()
        loss = 1.0 - similarity

        self.log(f"{stage}/loss", loss.item())
        self.log(f"{stage}/cosine", similarity.item())
        return loss

    def training_step(self, batch, batch_idx) -> Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx) -> Tensor:
        return self._step(batch, "val")

    def configure_optimizers(self):
        parameters = list(self.backbone.parameters()) + list(self.projection.parameters())
        return torch.optim.AdamW(parameters, lr=self.lr, weight_decay=self.weight_decay)


def run_validation(module, val_loader):
    module.eval()
    module.logged.pop("val/cosine", None)
    with torch.no_grad():
        for i, batch in enumerate(val_loader):
            module.validation_step(module.on_after_batch_transfer(batch, 0), i)
    module.train()
    return float(np.mean(module.logged["val/cosine"]))


def distill(epochs=10, batch_size=16, flip_prob=0.5, hsv_prob=0.5, val_fraction=0.1):
    torch.set_num_threads(1)
    np.random.seed(0)
    torch.manual_seed(0)
    cache = build_cache()
    dataset = CachedFeatureDataset(cache, flip_prob=flip_prob, hsv_prob=hsv_prob)
    print(f"{len(dataset)} images | teacher grid {dataset.grid}x{dataset.grid}x{dataset.dim} | flip cache: {dataset.has_flip}")

    held_out = max(1, int(len(dataset) * val_fraction))
    train_set, val_set = random_split(
        dataset, [len(dataset) - held_out, held_out],
        generator=torch.Generator().manual_seed(0),
    )

    def loader(subset, shuffle: bool) -> DataLoader:
        return DataLoader(subset, batch_size=batch_size, shuffle=shuffle,
                          collate_fn=distill_collate_fn, drop_last=shuffle)

    module = BackboneDistillModule(Backbone(), teacher_dim=dataset.dim)
    optimizer = module.configure_optimizers()
    train_loader, val_loader = loader(train_set, True), loader(val_set, False)

    best = (None, float("inf"))
    for epoch in range(epochs):
        module.logged.pop("train/cosine", None)
        for i, batch in enumerate(train_loader):
            loss = module.training_step(module.on_after_batch_transfer(batch, 0), i)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        val_cos = run_validation(module, val_loader)
        train_cos = float(np.mean(module.logged["train/cosine"]))
        if 1 - val_cos < best[1]:
            best = (epoch, 1 - val_cos)
        print(f"epoch {epoch:2d} train cosine {train_cos:.4f} val cosine {val_cos:.4f}")
    print(f"checkpoint monitor val/loss picks epoch {best[0]} (val loss {best[1]:.4f})")
    repeats = [run_validation(module, val_loader) for _ in range(3)]
    print("final weights validated 3 times: val cosine " + ", ".join(f"{c:.4f}" for c in repeats)
          + f" (spread {max(repeats) - min(repeats):.4f})")


if __name__ == "__main__":
    distill()
