# Source: hustvl/YOLOP, lib/models/YOLOP.py (MCnet.forward: nn.Sigmoid on the segmentation outputs), lib/core/loss.py (MultiHeadLoss, get_loss: BCEseg), lib/core/function.py (train), lib/core/evaluate.py (SegmentationMetric), commit 8d8f68df318c71f01d6f813c024df646c7d1978f
# Report: https://github.com/hustvl/YOLOP/issues/117
# YOLOP's drivable-area segmentation branch trained alone (cfg.TRAIN.DRIVABLE_ONLY: the
# detection and lane terms are zeroed): the network's segmentation head outputs 2 channels
# (background / drivable) that MCnet.forward passes through nn.Sigmoid, the targets are
# one-hot masks, and MultiHeadLoss compares them with BCEseg = BCEWithLogitsLoss(pos_weight);
# mIoU is computed from the channel argmax. The CSPDarknet encoder / FPN neck / decoder are
# reduced to a small conv encoder-decoder; the BDD100K frames are synthetic 32x32 road
# scenes (a bright trapezoid of road on a textured background).
import numpy as np
import torch
import torch.nn as nn


class Cfg:
    class LOSS:
        SEG_POS_WEIGHT = 1.0
        DA_SEG_GAIN = 0.2

    class TRAIN:
        LR0 = 0.001
        END_EPOCH = 6


class MCnet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.SiLU(),
                                     nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.SiLU())
        self.da_seg_head = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(32, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.SiLU(),
                                         nn.Upsample(scale_factor=2), nn.Conv2d(16, 2, 3, 1, 1))

    def forward(self, x):
        out = []
        x = self.encoder(x)
        x = self.da_seg_head(x)
        m = nn.Sigmoid()
        out.append(m(x))
        return out


class MultiHeadLoss(nn.Module):
    def __init__(self, losses, cfg, lambdas=None):
        super().__init__()
        self.losses = nn.ModuleList(losses)
        self.lambdas = lambdas or [1.0]
        self.cfg = cfg

    def forward(self, predictions, targets):
        BCEseg, = self.losses
        drive_area_seg_predicts = predictions[0].view(-1)
        drive_area_seg_targets = targets[0].view(-1)
        lseg_da = BCEseg(drive_area_seg_predicts, drive_area_seg_targets)
        lseg_da *= self.cfg.LOSS.DA_SEG_GAIN * self.lambdas[0]
        loss = lseg_da
        return loss, (lseg_da.item(),)


def get_loss(cfg):
    BCEseg = nn.BCEWithLogitsLoss(pos_weight=torch.Tensor([cfg.LOSS.SEG_POS_WEIGHT]))
    loss = MultiHeadLoss([BCEseg], cfg=cfg)
    return loss


def mean_iou(pred, gt):
    ious = []
    for c in range(2):
        inter = ((pred == c) & (gt == c)).sum().item()
        union = ((pred == c) | (gt == c)).sum().item()
        ious.append(inter / max(union, 1))
    return float(np.mean(ious))


def make_scenes(n, rng):
    yy, xx = np.mgrid[0:32, 0:32]
    imgs = np.zeros((n, 3, 32, 32), dtype=np.float32)
    masks = np.zeros((n, 2, 32, 32), dtype=np.float32)
    for k in range(n):
        horizon = rng.integers(8, 16)
        half_top, half_bot = rng.uniform(1, 5), rng.uniform(10, 16)
        cx = rng.uniform(12, 20)
        half = half_top + (half_bot - half_top) * (yy - horizon) / (31 - horizon)
        road = (yy >= horizon) & (np.abs(xx - cx) <= half)
        imgs[k] = rng.normal(0.3, 0.15, size=(3, 32, 32))
        imgs[k][:, road] = rng.normal(0.55, 0.1, size=(3, road.sum()))
        masks[k, 1] = road
        masks[k, 0] = ~road
    return torch.from_numpy(imgs), torch.from_numpy(masks)


def train(cfg):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    imgs, masks = make_scenes(320, rng)
    val_imgs, val_masks = make_scenes(96, rng)
    model = MCnet()
    criterion = get_loss(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.TRAIN.LR0, betas=(0.937, 0.999))
    g = torch.Generator().manual_seed(0)
    for epoch in range(cfg.TRAIN.END_EPOCH):
        model.train()
        perm = torch.randperm(len(imgs), generator=g)
        total = 0.0
        for i in range(0, len(imgs), 16):
            idx = perm[i:i + 16]
            outputs = model(imgs[idx])
            total_loss, head_losses = criterion(outputs, [masks[idx]])
            optimizer.zero_grad()
            total_loss.backward()
            optimizer.step()
            total += head_losses[0] * len(idx)
        model.eval()
        with torch.no_grad():
            da_seg_out = model(val_imgs)[0]
            _, da_predict = torch.max(da_seg_out, 1)
            _, da_gt = torch.max(val_masks, 1)
            miou = mean_iou(da_predict, da_gt)
        print(f"epoch {epoch}: lseg_da {total / len(imgs):.4f} | val mIoU {miou:.4f}, "
              f"seg output range [{da_seg_out.min():.3f}, {da_seg_out.max():.3f}]")


if __name__ == "__main__":
    train(Cfg)
