# Source: mindee/doctr, doctr/models/detection/differentiable_binarization/base.py (_DBNet.compute_distance, draw_thresh_map, compute_target), doctr/models/detection/differentiable_binarization/pytorch.py (DBNet.compute_loss), commit 95a81a1748740406cd006258b9a68c904e7d4386
# Report: https://github.com/mindee/doctr/pull/645
# DBNet text-detection training: the network predicts a probability map and a threshold map;
# compute_target rasterises the word boxes into a shrunk segmentation target and a threshold
# target (1 - normalised distance to the box border inside the padded box, rescaled to
# [thresh_min, thresh_max]); the loss is balanced BCE + dice on the approximate binary map +
# L1 on the threshold map. Shapely/pyclipper/cv2 polygon offsetting is replaced by the
# equivalent rectangle offsets for axis-aligned boxes; the ResNet/FPN is a 4-conv network on
# synthetic 32x32 "documents" with 1-3 bright word bars.
from typing import List, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def offset_rect(poly: np.ndarray, distance: float) -> np.ndarray:
    x0, y0 = poly[:, 0].min() - distance, poly[:, 1].min() - distance
    x1, y1 = poly[:, 0].max() + distance, poly[:, 1].max() + distance
    return np.array([[x0, y0], [x0, y1], [x1, y1], [x1, y0]])


class _DBNet:
    shrink_ratio = 0.4
    thresh_min = 0.3
    thresh_max = 0.7
    min_size_box = 3

    @staticmethod
    def compute_distance(xs, ys, a, b, eps: float = 1e-7) -> float:
        square_dist_1 = np.square(xs - a[0]) + np.square(ys - a[1])
        square_dist_2 = np.square(xs - b[0]) + np.square(ys - b[1])
        square_dist = np.square(a[0] - b[0]) + np.square(a[1] - b[1])
        cosin = (square_dist - square_dist_1 - square_dist_2) / (2 * np.sqrt(square_dist_1 * square_dist_2) + eps)
        square_sin = 1 - np.square(cosin)
        square_sin = np.nan_to_num(square_sin)
        result = np.sqrt(square_dist_1 * square_dist_2 * square_sin / square_dist)
        result[cosin < 0] = np.sqrt(np.fmin(square_dist_1, square_dist_2))[cosin < 0]
        return result

    def draw_thresh_map(self, polygon, canvas, mask) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        w, h = np.ptp(polygon[:, 0]), np.ptp(polygon[:, 1])
        distance = (w * h) * (1 - np.power(self.shrink_ratio, 2)) / (2 * (w + h))
        padded_polygon = np.round(offset_rect(polygon, distance)).astype(np.int64)

        # Fill the mask with 1 on the new padded polygon
        mask[max(padded_polygon[:, 1].min(), 0):padded_polygon[:, 1].max() + 1,
             max(padded_polygon[:, 0].min(), 0):padded_polygon[:, 0].max() + 1] = 1

        # Get min/max to recover polygon after distance computation
        xmin = padded_polygon[:, 0].min()
        xmax = padded_polygon[:, 0].max()
        ymin = padded_polygon[:, 1].min()
        ymax = padded_polygon[:, 1].max()
        width = xmax - xmin + 1
        height = ymax - ymin + 1
        # Get absolute polygon for distance computation
        polygon = polygon.astype(np.float64)
        polygon[:, 0] = polygon[:, 0] - xmin
        polygon[:, 1] = polygon[:, 1] - ymin
        # Get absolute padded polygon
        xs = np.broadcast_to(np.linspace(0, width - 1, num=width).reshape(1, width), (height, width))
        ys = np.broadcast_to(np.linspace(0, height - 1, num=height).reshape(height, 1), (height, width))

        # Compute distance map to fill the padded polygon
        distance_map = np.zeros((polygon.shape[0], height, width), dtype=polygon.dtype)
        for i in range(polygon.shape[0]):
            j = (i + 1) % polygon.shape[0]
            absolute_distance = self.compute_distance(xs, ys, polygon[i], polygon[j])
            distance_map[i] = np.clip(absolute_distance / distance, 0, 1)
        distance_map = np.min(distance_map, axis=0)

        # Clip the padded polygon inside the canvas
        xmin_valid = min(max(0, xmin), canvas.shape[1] - 1)
        xmax_valid = min(max(0, xmax), canvas.shape[1] - 1)
        ymin_valid = min(max(0, ymin), canvas.shape[0] - 1)
        ymax_valid = min(max(0, ymax), canvas.shape[0] - 1)

        # Fill the canvas with the distances computed inside the valid padded polygon
        canvas[ymin_valid:ymax_valid + 1, xmin_valid:xmax_valid + 1] = np.fmax(
            1 - distance_map[
                ymin_valid - ymin:ymax_valid - ymin + 1,
                xmin_valid - xmin:xmax_valid - xmin + 1
            ],
            canvas[ymin_valid:ymax_valid + 1, xmin_valid:xmax_valid + 1]
        )

        return polygon, canvas, mask

    def compute_target(self, target: List[np.ndarray], output_shape: Tuple[int, int, int]):
        input_dtype = target[0].dtype if len(target) > 0 else np.float32

        seg_target = np.zeros(output_shape, dtype=np.uint8)
        seg_mask = np.ones(output_shape, dtype=bool)
        thresh_target = np.zeros(output_shape, dtype=np.uint8)
        thresh_mask = np.ones(output_shape, dtype=np.uint8)

        for idx, _target in enumerate(target):
            if _target.shape[0] == 0:
                seg_mask[idx] = False
            abs_boxes = _target.copy()
            abs_boxes[:, [0, 2]] *= output_shape[-1]
            abs_boxes[:, [1, 3]] *= output_shape[-2]
            abs_boxes = abs_boxes.round().astype(np.int32)
            boxes_size = np.minimum(abs_boxes[:, 2] - abs_boxes[:, 0], abs_boxes[:, 3] - abs_boxes[:, 1])
            polys = np.stack([
                abs_boxes[:, [0, 1]],
                abs_boxes[:, [0, 3]],
                abs_boxes[:, [2, 3]],
                abs_boxes[:, [2, 1]],
            ], axis=1)

            for box, box_size, poly in zip(abs_boxes, boxes_size, polys):
                if box_size < self.min_size_box:
                    seg_mask[idx, box[1]: box[3] + 1, box[0]: box[2] + 1] = False
                    continue
                # Negative shrink for gt, as described in paper
                w, h = box[2] - box[0], box[3] - box[1]
                distance = (w * h) * (1 - np.power(self.shrink_ratio, 2)) / (2 * (w + h))
                shrinked = np.round(offset_rect(poly, -distance)).astype(np.int32)
                seg_target[idx, shrinked[:, 1].min(): shrinked[:, 1].max() + 1,
                           shrinked[:, 0].min(): shrinked[:, 0].max() + 1] = 1

                # Draw on both thresh map and thresh mask
                poly, thresh_target[idx], thresh_mask[idx] = self.draw_thresh_map(poly, thresh_target[idx],
                                                                                  thresh_mask[idx])

        thresh_target = thresh_target.astype(input_dtype) * (self.thresh_max - self.thresh_min) + self.thresh_min

        seg_target = seg_target.astype(input_dtype)
        seg_mask = seg_mask.astype(bool)
        thresh_target = thresh_target.astype(input_dtype)
        thresh_mask = thresh_mask.astype(bool)
        return seg_target, seg_mask, thresh_target, thresh_mask


class DBNet(_DBNet, nn.Module):
    def __init__(self, ch=16):
        nn.Module.__init__(self)
        self.feat = nn.Sequential(
            nn.Conv2d(1, ch, 3, padding=1), nn.BatchNorm2d(ch), nn.ReLU(),
            nn.Conv2d(ch, ch, 3, padding=2, dilation=2), nn.BatchNorm2d(ch), nn.ReLU(),
            nn.Conv2d(ch, ch, 3, padding=1), nn.BatchNorm2d(ch), nn.ReLU())
        self.prob_head = nn.Conv2d(ch, 1, 1)
        self.thresh_head = nn.Conv2d(ch, 1, 1)

    def forward(self, x, target=None):
        feat = self.feat(x)
        out_map, thresh_map = self.prob_head(feat), self.thresh_head(feat)
        out = {"out_map": out_map, "thresh_map": thresh_map}
        if target is not None:
            out["loss"] = self.compute_loss(out_map, thresh_map, target)
        return out

    def compute_loss(self, out_map, thresh_map, target):
        prob_map = torch.sigmoid(out_map.squeeze(1))
        thresh_map = torch.sigmoid(thresh_map.squeeze(1))

        targets = self.compute_target(target, prob_map.shape)

        seg_target, seg_mask = torch.from_numpy(targets[0]), torch.from_numpy(targets[1])
        thresh_target, thresh_mask = torch.from_numpy(targets[2]), torch.from_numpy(targets[3])
        self.last_thresh_target = thresh_target[thresh_mask]

        # Compute balanced BCE loss for proba_map
        bce_scale = 5.
        bce_loss = F.binary_cross_entropy_with_logits(out_map.squeeze(1), seg_target, reduction='none')[seg_mask]

        neg_target = 1 - seg_target[seg_mask]
        positive_count = seg_target[seg_mask].sum()
        negative_count = torch.minimum(neg_target.sum(), 3. * positive_count)
        negative_loss = bce_loss * neg_target
        negative_loss = negative_loss.sort().values[-int(negative_count.item()):]
        sum_losses = torch.sum(bce_loss * seg_target[seg_mask]) + torch.sum(negative_loss)
        balanced_bce_loss = sum_losses / (positive_count + negative_count + 1e-6)

        # Compute dice loss for approxbin_map
        bin_map = 1 / (1 + torch.exp(-50. * (prob_map[seg_mask] - thresh_map[seg_mask])))

        bce_min = bce_loss.min()
        weights = (bce_loss - bce_min) / (bce_loss.max() - bce_min) + 1.
        inter = torch.sum(bin_map * seg_target[seg_mask] * weights)
        union = torch.sum(bin_map) + torch.sum(seg_target[seg_mask]) + 1e-8
        dice_loss = 1 - 2.0 * inter / union

        # Compute l1 loss for thresh_map
        l1_scale = 10.
        if torch.any(thresh_mask):
            l1_loss = torch.mean(torch.abs(thresh_map[thresh_mask] - thresh_target[thresh_mask]))
        else:
            l1_loss = torch.zeros(1)
        self.last_l1 = l1_loss.item()

        return l1_scale * l1_loss + bce_scale * balanced_bce_loss + dice_loss


def make_docs(n, rng, size=32):
    images = rng.normal(0, 0.3, size=(n, 1, size, size)).astype(np.float32)
    targets = []
    for i in range(n):
        boxes = []
        for k in range(rng.randint(1, 4)):
            y0 = 2 + 10 * k + rng.randint(0, 3)
            x0 = rng.randint(1, 10)
            w, h = rng.randint(10, 20), rng.randint(5, 8)
            y1, x1 = min(y0 + h, size - 1), min(x0 + w, size - 1)
            images[i, 0, y0:y1, x0:x1] += 1.0
            boxes.append([x0 / size, y0 / size, x1 / size, y1 / size])
        targets.append(np.array(boxes, np.float32))
    return torch.from_numpy(images), targets


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    images, targets = make_docs(128, rng)
    model = DBNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(5):
        model.train()
        losses, l1s, tmin, tmax, tuniq = [], [], 1.0, 0.0, set()
        for i in range(0, 128, 16):
            out = model(images[i:i + 16], targets[i:i + 16])
            optimizer.zero_grad()
            out["loss"].backward()
            optimizer.step()
            losses.append(out["loss"].item())
            l1s.append(model.last_l1)
            tt = model.last_thresh_target
            tmin, tmax = min(tmin, tt.min().item()), max(tmax, tt.max().item())
            tuniq |= set(np.round(tt.numpy(), 3).tolist())
        with torch.no_grad():
            thresh_pred = torch.sigmoid(model(images[:16])["thresh_map"])
        print(f"epoch {epoch} loss {np.mean(losses):.4f} thresh L1 {np.mean(l1s):.4f} | thresh target in masked area: "
              f"min {tmin:.3f} max {tmax:.3f} distinct {len(tuniq)} | predicted thresh map min {thresh_pred.min().item():.3f} "
              f"max {thresh_pred.max().item():.3f}")


if __name__ == "__main__":
    main()
