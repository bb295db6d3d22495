# Source: huggingface/cookbook, notebooks/en/semantic_segmentation_fine_tuning_inference.ipynb (albumentations_transform, train_transforms, val_transforms, compute_metrics, training), commit 26571c10a6a5f15ff94ae9a8e21b1a816df6cfc0
# Report: https://github.com/huggingface/cookbook/issues/248
# Semantic segmentation fine-tuning: albumentations train-time augmentation, an image
# processor that turns (images, labels) into pixel_values / labels, a segmentation model
# whose logits are upsampled to the label size for cross-entropy, and mean IoU on the
# validation split. Segformer + Trainer are replaced by a small conv net and a plain loop;
# albumentations (not installed here) by a shim with its call convention; the sidewalk
# dataset by synthetic 32x32 street-like scenes (road, sidewalk, car, background).
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class A:
    """Minimal albumentations with its call convention: Compose(...)(image=..., mask=...)."""

    class Compose:
        def __init__(self, transforms):
            self.transforms = transforms

        def __call__(self, image, mask=None):
            data = {"image": image}
            if mask is not None:
                data["mask"] = mask
            for t in self.transforms:
                data = t(data)
            return data

    class HorizontalFlip:
        def __init__(self, p=0.5):
            self.p = p

        def __call__(self, data):
            if A.rng.uniform() < self.p:
                data = {k: np.ascontiguousarray(v[:, ::-1]) for k, v in data.items()}
            return data

    class ShiftScaleRotate:
        def __init__(self, shift_limit=0.1, scale_limit=0.1, rotate_limit=30, p=0.5):
            self.shift_limit, self.scale_limit, self.rotate_limit, self.p = shift_limit, scale_limit, rotate_limit, p

        def __call__(self, data):
            if A.rng.uniform() >= self.p:
                return data
            ang = np.deg2rad(A.rng.uniform(-self.rotate_limit, self.rotate_limit))
            s = 1 + A.rng.uniform(-self.scale_limit, self.scale_limit)
            tx, ty = A.rng.uniform(-self.shift_limit, self.shift_limit, size=2) * 2
            theta = torch.tensor([[np.cos(ang) / s, -np.sin(ang) / s, tx],
                                  [np.sin(ang) / s, np.cos(ang) / s, ty]], dtype=torch.float32)[None]
            out = {}
            for k, v in data.items():
                t = torch.from_numpy(v.astype(np.float32))
                t = t.permute(2, 0, 1)[None] if t.ndim == 3 else t[None, None]
                grid = F.affine_grid(theta, t.shape, align_corners=False)
                w = F.grid_sample(t, grid, mode="bilinear" if k == "image" else "nearest",
                                  padding_mode="reflection", align_corners=False)[0]
                out[k] = (w.permute(1, 2, 0) if v.ndim == 3 else w[0]).numpy().astype(v.dtype)
            return out

    class RandomBrightnessContrast:
        def __init__(self, brightness_limit=0.25, contrast_limit=0.25, p=0.5):
            self.b, self.c, self.p = brightness_limit, contrast_limit, p

        def __call__(self, data):
            if A.rng.uniform() < self.p:
                img = data["image"].astype(np.float32)
                img = img * (1 + A.rng.uniform(-self.c, self.c)) + 255 * A.rng.uniform(-self.b, self.b)
                data = dict(data, image=np.clip(img, 0, 255).astype(np.uint8))
            return data

    rng = np.random.RandomState(0)


id2label = {0: "background", 1: "road", 2: "sidewalk", 3: "car"}
COLORS = np.array([[90, 120, 90], [70, 70, 80], [150, 140, 130], [180, 40, 40]], dtype=np.float32)


def make_scenes(n, rng, size=32):
    images, labels = [], []
    for _ in range(n):
        lab = np.zeros((size, size), dtype=np.uint8)
        horizon = rng.randint(10, 16)
        lab[horizon:, :] = 1
        side = rng.randint(6, 12)
        if rng.uniform() < 0.5:
            lab[horizon:, :side] = 2
        else:
            lab[horizon:, size - side:] = 2
        cy, cx = rng.randint(horizon, size - 6), rng.randint(0, size - 10)
        lab[cy:cy + 6, cx:cx + 10] = 3
        img = COLORS[lab] + rng.normal(0, 18, size=(size, size, 3))
        images.append(np.clip(img, 0, 255).astype(np.uint8))
        labels.append(lab)
    return images, labels


class ImageProcessor:
    """Stands in for SegformerImageProcessor: rescale + normalize, labels as long tensors."""

    def __call__(self, images, segmentation_maps=None):
        px = torch.stack([torch.from_numpy(np.asarray(im, dtype=np.float32) / 255.0).permute(2, 0, 1)
                          for im in images])
        px = (px - 0.5) / 0.25
        out = {"pixel_values": px}
        if segmentation_maps is not None:
            out["labels"] = torch.stack([torch.from_numpy(np.asarray(m, dtype=np.int64)) for m in segmentation_maps])
        return out


class TinySegModel(nn.Module):
    """Stands in for SegformerForSemanticSegmentation: logits at 1/4 resolution."""

    def __init__(self, num_labels):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU())
        self.decode_head = nn.Conv2d(32, num_labels, 1)

    def forward(self, pixel_values, labels=None):
        logits = self.decode_head(self.encoder(pixel_values))
        loss = None
        if labels is not None:
            upsampled_logits = F.interpolate(logits, size=labels.shape[-2:], mode="bilinear", align_corners=False)
            loss = F.cross_entropy(upsampled_logits, labels, ignore_index=255)
        return loss, logits


image_processor = ImageProcessor()

albumentations_transform = A.Compose([
    A.HorizontalFlip(p=0.5),
    A.ShiftScaleRotate(shift_limit=0.1, scale_limit=0.1, rotate_limit=30, p=0.7),
    A.RandomBrightnessContrast(brightness_limit=0.25, contrast_limit=0.25, p=0.5),
])


def train_transforms(example_batch):
    augmented_images = [albumentations_transform(image=np.array(x))['image'] for x in example_batch['pixel_values']]
    labels = [x for x in example_batch['label']]
    inputs = image_processor(augmented_images, labels)
    return inputs


def val_transforms(example_batch):
    images = [x for x in example_batch['pixel_values']]
    labels = [x for x in example_batch['label']]
    inputs = image_processor(images, labels)
    return inputs


def compute_metrics(logits, labels, num_labels):
    upsampled = F.interpolate(logits, size=labels.shape[-2:], mode="bilinear", align_corners=False)
    pred = upsampled.argmax(dim=1)
    ious = []
    for c in range(num_labels):
        inter = ((pred == c) & (labels == c)).sum().item()
        union = ((pred == c) | (labels == c)).sum().item()
        if union > 0:
            ious.append(inter / union)
    acc = (pred == labels).float().mean().item()
    return {"mean_iou": float(np.mean(ious)), "per_category_iou": ious, "overall_accuracy": acc}


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    train_imgs, train_labels = make_scenes(256, rng)
    test_imgs, test_labels = make_scenes(96, rng)
    train_ds = {"pixel_values": train_imgs, "label": train_labels}
    test_ds = {"pixel_values": test_imgs, "label": test_labels}

    model = TinySegModel(num_labels=len(id2label))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch_size, epochs = 16, 8
    val_batch = val_transforms(test_ds)
    t0 = time.time()
    for epoch in range(epochs):
        model.train()
        perm = np.random.RandomState(epoch).permutation(len(train_imgs))
        losses = []
        for i in range(0, len(perm), batch_size):
            idx = perm[i:i + batch_size]
            batch = train_transforms({"pixel_values": [train_ds["pixel_values"][j] for j in idx],
                                      "label": [train_ds["label"][j] for j in idx]})
            loss, _ = model(**batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            val_loss, logits = model(**val_batch)
        metrics = compute_metrics(logits, val_batch["labels"], len(id2label))
        print("epoch %d train_loss %.4f eval_loss %.4f eval_mean_iou %.4f eval_overall_accuracy %.4f per_category_iou %s"
              % (epoch + 1, np.mean(losses), val_loss.item(), metrics["mean_iou"], metrics["overall_accuracy"],
                 " ".join("%.3f" % v for v in metrics["per_category_iou"])))
    print("done in %.1fs" % (time.time() - t0))


if __name__ == "__main__":
    main()
