# Source: MultimediaTechLab/YOLO, yolo/tools/solver.py (ModelTrainer.train_one_batch, train_one_epoch), yolo/tools/loss_functions.py (BCELoss, BoxLoss, DFLoss, YOLOLoss, DualLoss), commit 8228669808a626fc5f9c233fdb35550b5e041fae
# Report: https://github.com/MultimediaTechLab/YOLO/pull/83
# YOLOv9-style anchor-free detector trained with the dual (AUX + Main) head loss. The YOLO
# backbone, the BoxMatcher (TAL) and the data pipeline are reduced: a small conv net on 64x64
# synthetic images with one box each, anchors whose center lies inside the box are positives.
from collections import defaultdict
from typing import Any, Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn import BCEWithLogitsLoss


def rss_mb():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * 4096 / 2 ** 20


def calculate_iou(bbox1, bbox2):
    lt = torch.max(bbox1[:, None, :2], bbox2[None, :, :2])
    rb = torch.min(bbox1[:, None, 2:], bbox2[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area1 = (bbox1[:, 2:] - bbox1[:, :2]).prod(-1)
    area2 = (bbox2[:, 2:] - bbox2[:, :2]).prod(-1)
    return inter / (area1[:, None] + area2[None, :] - inter + 1e-9)


class Vec2Box:
    def __init__(self, image_size=64, strides=(8,), reg_max=16):
        grids, scalers = [], []
        for stride in strides:
            n = image_size // stride
            ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
            grids.append(torch.stack([xs, ys], -1).view(-1, 2).float() * stride + stride / 2)
            scalers.append(torch.full((n * n,), float(stride)))
        self.anchor_grid = torch.cat(grids)
        self.scaler = torch.cat(scalers)
        self.reg_max = reg_max

    def __call__(self, predicts):
        preds_cls, preds_anc = predicts
        B = preds_cls.shape[0]
        preds_cls = preds_cls.flatten(2).transpose(1, 2)
        preds_anc = preds_anc.view(B, 4, self.reg_max, -1).permute(0, 3, 1, 2)
        dist = (preds_anc.softmax(-1) * torch.arange(self.reg_max, dtype=torch.float)).sum(-1)
        lt, rb = dist.chunk(2, -1)
        preds_box = torch.cat([self.anchor_grid - lt * self.scaler[:, None], self.anchor_grid + rb * self.scaler[:, None]], -1)
        return preds_cls, preds_anc, preds_box


class BoxMatcher:
    def __init__(self, class_num, anchors):
        self.class_num = class_num
        self.anchors = anchors

    def __call__(self, target, predict):
        cls, box = target[:, 0].long(), target[:, 1:]
        inside = ((self.anchors[None] > box[:, None, :2]) & (self.anchors[None] < box[:, None, 2:])).all(-1)
        align_cls = F.one_hot(cls, self.class_num).float()[:, None, :] * inside[..., None]
        align_box = box[:, None, :].expand(-1, self.anchors.shape[0], -1)
        return torch.cat([align_cls, align_box], -1), inside


class BCELoss(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bce = BCEWithLogitsLoss(reduction="none")

    def forward(self, predicts_cls: Tensor, targets_cls: Tensor, cls_norm: Tensor) -> Any:
        return self.bce(predicts_cls, targets_cls).sum() / cls_norm


class BoxLoss(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(
        self, predicts_bbox: Tensor, targets_bbox: Tensor, valid_masks: Tensor, box_norm: Tensor, cls_norm: Tensor
    ) -> Any:
        valid_bbox = valid_masks[..., None].expand(-1, -1, 4)
        picked_predict = predicts_bbox[valid_bbox].view(-1, 4)
        picked_targets = targets_bbox[valid_bbox].view(-1, 4)

        iou = calculate_iou(picked_predict, picked_targets).diag()
        loss_iou = 1.0 - iou
        loss_iou = (loss_iou * box_norm).sum() / cls_norm
        return loss_iou


class DFLoss(nn.Module):
    def __init__(self, vec2box: Vec2Box, reg_max: int) -> None:
        super().__init__()
        self.anchors_norm = (vec2box.anchor_grid / vec2box.scaler[:, None])[None]
        self.reg_max = reg_max

    def forward(
        self, predicts_anc: Tensor, targets_bbox: Tensor, valid_masks: Tensor, box_norm: Tensor, cls_norm: Tensor
    ) -> Any:
        valid_bbox = valid_masks[..., None].expand(-1, -1, 4)
        bbox_lt, bbox_rb = targets_bbox.chunk(2, -1)
        targets_dist = torch.cat(((self.anchors_norm - bbox_lt), (bbox_rb - self.anchors_norm)), -1).clamp(
            0, self.reg_max - 1.01
        )
        picked_targets = targets_dist[valid_bbox].view(-1)
        picked_predict = predicts_anc[valid_bbox].view(-1, self.reg_max)

        label_left, label_right = picked_targets.floor(), picked_targets.floor() + 1
        weight_left, weight_right = label_right - picked_targets, picked_targets - label_left

        loss_left = F.cross_entropy(picked_predict, label_left.to(torch.long), reduction="none")
        loss_right = F.cross_entropy(picked_predict, label_right.to(torch.long), reduction="none")
        loss_dfl = loss_left * weight_left + loss_right * weight_right
        loss_dfl = loss_dfl.view(-1, 4).mean(-1)
        loss_dfl = (loss_dfl * box_norm).sum() / cls_norm
        return loss_dfl


class YOLOLoss:
    def __init__(self, vec2box: Vec2Box, class_num: int = 80, reg_max: int = 16) -> None:
        self.class_num = class_num
        self.vec2box = vec2box

        self.cls = BCELoss()
        self.dfl = DFLoss(vec2box, reg_max)
        self.iou = BoxLoss()

        self.matcher = BoxMatcher(self.class_num, vec2box.anchor_grid)

    def separate_anchor(self, anchors):
        anchors_cls, anchors_box = torch.split(anchors, (self.class_num, 4), dim=-1)
        anchors_box = anchors_box / self.vec2box.scaler[None, :, None]
        return anchors_cls, anchors_box

    def __call__(self, predicts: List[Tensor], targets: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        predicts_cls, predicts_anc, predicts_box = predicts
        align_targets, valid_masks = self.matcher(targets, (predicts_cls.detach(), predicts_box.detach()))

        targets_cls, targets_bbox = self.separate_anchor(align_targets)
        predicts_box = predicts_box / self.vec2box.scaler[None, :, None]

        cls_norm = targets_cls.sum()
        box_norm = targets_cls.sum(-1)[valid_masks]

        ## -- CLS -- ##
        loss_cls = self.cls(predicts_cls, targets_cls, cls_norm)
        ## -- IOU -- ##
        loss_iou = self.iou(predicts_box, targets_bbox, valid_masks, box_norm, cls_norm)
        ## -- DFL -- ##
        loss_dfl = self.dfl(predicts_anc, targets_bbox, valid_masks, box_norm, cls_norm)

        return loss_iou, loss_dfl, loss_cls


class DualLoss:
    def __init__(self, vec2box, class_num, reg_max) -> None:
        self.loss = YOLOLoss(vec2box, class_num=class_num, reg_max=reg_max)

        self.aux_rate = 0.25

        self.iou_rate = 7.5
        self.dfl_rate = 1.5
        self.cls_rate = 0.5

    def __call__(
        self, aux_predicts: List[Tensor], main_predicts: List[Tensor], targets: Tensor
    ) -> Tuple[Tensor, Dict[str, Tensor]]:
        aux_iou, aux_dfl, aux_cls = self.loss(aux_predicts, targets)
        main_iou, main_dfl, main_cls = self.loss(main_predicts, targets)

        loss_dict = {
            "BoxLoss": self.iou_rate * (aux_iou * self.aux_rate + main_iou),
            "DFLoss": self.dfl_rate * (aux_dfl * self.aux_rate + main_dfl),
            "BCELoss": self.cls_rate * (aux_cls * self.aux_rate + main_cls),
        }
        loss_sum = sum(list(loss_dict.values())) / len(loss_dict)
        return loss_sum, loss_dict


class YOLO(nn.Module):
    def __init__(self, class_num=3, reg_max=16):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.SiLU(),
            nn.Conv2d(32, 64, 3, 2, 1), nn.BatchNorm2d(64), nn.SiLU(),
            nn.Conv2d(64, 64, 3, 2, 1), nn.BatchNorm2d(64), nn.SiLU())
        self.main_cls, self.main_anc = nn.Conv2d(64, class_num, 1), nn.Conv2d(64, 4 * reg_max, 3, 1, 1)
        self.aux_cls, self.aux_anc = nn.Conv2d(64, class_num, 1), nn.Conv2d(64, 4 * reg_max, 3, 1, 1)

    def forward(self, x):
        feat = self.backbone(x)
        return {"Main": (self.main_cls(feat), self.main_anc(feat)), "AUX": (self.aux_cls(feat), self.aux_anc(feat))}


class ModelTrainer:
    def __init__(self, model, vec2box, device, class_num, reg_max):
        self.model = model
        self.use_ddp = False
        self.vec2box = vec2box
        self.device = device
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True)
        self.loss_fn = DualLoss(vec2box, class_num, reg_max)

    def train_one_batch(self, images: Tensor, targets: Tensor):
        images, targets = images.to(self.device), targets.to(self.device)
        self.optimizer.zero_grad()

        predicts = self.model(images)
        aux_predicts = self.vec2box(predicts["AUX"])
        main_predicts = self.vec2box(predicts["Main"])
        loss, loss_item = self.loss_fn(aux_predicts, main_predicts, targets)

        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=10.0)
        self.optimizer.step()

        return loss_item

    def train_one_epoch(self, dataloader):
        self.model.train()
        total_loss = defaultdict(lambda: torch.tensor(0.0, device=self.device))
        total_samples = 0
        for batch_size, images, targets, *_ in dataloader:
            loss_each = self.train_one_batch(images, targets)

            for loss_name, loss_val in loss_each.items():
                total_loss[loss_name] += loss_val * batch_size
            total_samples += batch_size

        for loss_val in total_loss.values():
            loss_val /= total_samples

        return total_loss


def make_batch(gen, batch_size, class_num=3):
    images = 0.1 * torch.randn(batch_size, 3, 64, 64, generator=gen)
    targets = []
    for b in range(batch_size):
        cls = int(torch.randint(0, class_num, (1,), generator=gen))
        w, h = torch.randint(16, 40, (2,), generator=gen).tolist()
        x0, y0 = torch.randint(0, 64 - w, (1,), generator=gen).item(), torch.randint(0, 64 - h, (1,), generator=gen).item()
        images[b, cls, y0:y0 + h, x0:x0 + w] += 1.0
        targets.append([cls, x0, y0, x0 + w, y0 + h])
    return batch_size, images, torch.tensor(targets, dtype=torch.float)


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    dataloader = [make_batch(gen, 16) for _ in range(30)]
    vec2box = Vec2Box(image_size=64, strides=(8,), reg_max=16)
    trainer = ModelTrainer(YOLO(class_num=3, reg_max=16), vec2box, "cpu", class_num=3, reg_max=16)
    print("RSS before training {:.0f} MB".format(rss_mb()))
    for epoch in range(3):
        total_loss = trainer.train_one_epoch(dataloader)
        print("epoch {} | {} | RSS {:.0f} MB".format(
            epoch, " ".join(f"{k} {float(v):.4f}" for k, v in total_loss.items()), rss_mb()))


if __name__ == "__main__":
    main()
