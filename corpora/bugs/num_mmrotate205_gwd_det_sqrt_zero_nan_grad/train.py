# Source: open-mmlab/mmrotate, mmrotate/models/losses/gaussian_dist_loss.py (xy_wh_r_2_xy_sigma, postprocess, gwd_loss, GDLoss), commit 05118566865314afad6b6d0b666b0f0e57bd22b5
# Report: https://github.com/open-mmlab/mmrotate/issues/205
# Rotated FCOS-style dense detector trained with the Gaussian Wasserstein distance loss (GDLoss,
# loss_type='gwd') on decoded rotated boxes: every feature-map point inside an object regresses
# its distances to the four box sides (Scale, then clamp(min=0) as with norm_on_bbox) and the box
# angle; the prediction and the target are decoded to (x, y, w, h, angle), turned into 2-D
# Gaussians and compared with gwd_loss, weighted by centerness. SGD with grad_clip max_norm 35 as
# in the mmrotate configs. DOTA is replaced by synthetic 32x32 images holding one bright rotated
# rectangle; the ResNet-FPN backbone by two conv layers at stride 4.
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

STRIDE = 4
SIZE = 32


# ---- mmdet.models.losses.utils (weight_reduce_loss, weighted_loss) ----
def reduce_loss(loss, reduction):
    if reduction == 'none':
        return loss
    elif reduction == 'mean':
        return loss.mean()
    return loss.sum()


def weight_reduce_loss(loss, weight=None, reduction='mean', avg_factor=None):
    if weight is not None:
        loss = loss * weight
    if avg_factor is None:
        loss = reduce_loss(loss, reduction)
    else:
        if reduction == 'mean':
            eps = torch.finfo(torch.float32).eps
            loss = loss.sum() / (avg_factor + eps)
        elif reduction != 'none':
            raise ValueError('avg_factor can not be used with reduction="sum"')
    return loss


def weighted_loss(loss_func):
    def wrapper(pred, target, weight=None, reduction='mean', avg_factor=None, **kwargs):
        loss = loss_func(pred, target, **kwargs)
        loss = weight_reduce_loss(loss, weight, reduction, avg_factor)
        return loss
    return wrapper


# ---- mmrotate/models/losses/gaussian_dist_loss.py ----
def xy_wh_r_2_xy_sigma(xywhr):
    """Convert oriented bounding box to 2-D Gaussian distribution."""
    _shape = xywhr.shape
    assert _shape[-1] == 5
    xy = xywhr[..., :2]
    wh = xywhr[..., 2:4].clamp(min=1e-7, max=1e7).reshape(-1, 2)
    r = xywhr[..., 4]
    cos_r = torch.cos(r)
    sin_r = torch.sin(r)
    R = torch.stack((cos_r, -sin_r, sin_r, cos_r), dim=-1).reshape(-1, 2, 2)
    S = 0.5 * torch.diag_embed(wh)

    sigma = R.bmm(S.square()).bmm(R.permute(0, 2,
                                            1)).reshape(_shape[:-1] + (2, 2))

    return xy, sigma


def postprocess(distance, fun='log1p', tau=1.0):
    """Convert distance to loss."""
    if fun == 'log1p':
        distance = torch.log1p(distance)
    elif fun == 'sqrt':
        distance = torch.sqrt(distance)
    elif fun == 'none':
        pass
    else:
        raise ValueError(f'Invalid non-linear function {fun}')

    if tau >= 1.0:
        return 1 - 1 / (tau + distance)
    else:
        return distance


@weighted_loss
def gwd_loss(pred, target, fun='log1p', tau=1.0, alpha=1.0, normalize=True):
    """Gaussian Wasserstein distance loss."""
    xy_p, Sigma_p = pred
    xy_t, Sigma_t = target

    xy_distance = (xy_p - xy_t).square().sum(dim=-1)

    whr_distance = Sigma_p.diagonal(dim1=-2, dim2=-1).sum(dim=-1)
    whr_distance = whr_distance + Sigma_t.diagonal(
        dim1=-2, dim2=-1).sum(dim=-1)

    _t_tr = (Sigma_p.bmm(Sigma_t)).diagonal(dim1=-2, dim2=-1).sum(dim=-1)
    _t_det_sqrt = (Sigma_p.det() * Sigma_t.det()).clamp(0).sqrt()
    whr_distance = whr_distance + (-2) * (
        (_t_tr + 2 * _t_det_sqrt).clamp(0).sqrt())

    distance = (xy_distance + alpha * alpha * whr_distance).clamp(0).sqrt()

    if normalize:
        scale = 2 * (_t_det_sqrt.sqrt().sqrt()).clamp(1e-7)
        distance = distance / scale

    return postprocess(distance, fun=fun, tau=tau)


class GDLoss(nn.Module):
    """Gaussian based loss."""
    BAG_GD_LOSS = {'gwd': gwd_loss}
    BAG_PREP = {'xy_wh_r': xy_wh_r_2_xy_sigma}

    def __init__(self, loss_type, representation='xy_wh_r', fun='log1p', tau=0.0, alpha=1.0,
                 reduction='mean', loss_weight=1.0, **kwargs):
        super(GDLoss, self).__init__()
        assert reduction in ['none', 'sum', 'mean']
        assert fun in ['log1p', 'none', 'sqrt']
        assert loss_type in self.BAG_GD_LOSS
        self.loss = self.BAG_GD_LOSS[loss_type]
        self.preprocess = self.BAG_PREP[representation]
        self.fun = fun
        self.tau = tau
        self.alpha = alpha
        self.reduction = reduction
        self.loss_weight = loss_weight
        self.kwargs = kwargs

    def forward(self, pred, target, weight=None, avg_factor=None, reduction_override=None, **kwargs):
        assert reduction_override in (None, 'none', 'mean', 'sum')
        reduction = (
            reduction_override if reduction_override else self.reduction)
        if (weight is not None) and (not torch.any(weight > 0)) and (
                reduction != 'none'):
            return (pred * weight).sum()
        if weight is not None and weight.dim() > 1:
            assert weight.shape == pred.shape
            weight = weight.mean(-1)
        _kwargs = dict(self.kwargs)
        _kwargs.update(kwargs)

        pred = self.preprocess(pred)
        target = self.preprocess(target)

        return self.loss(
            pred,
            target,
            fun=self.fun,
            tau=self.tau,
            alpha=self.alpha,
            weight=weight,
            avg_factor=avg_factor,
            reduction=reduction,
            **_kwargs) * self.loss_weight


# ---- DistanceAnglePointCoder.decode (distance2obb, le90) ----
def norm_angle(angle):
    return (angle + math.pi / 2) % math.pi - math.pi / 2


def distance2obb(points, distance):
    distance, angle = distance.split([4, 1], dim=-1)
    cos_angle, sin_angle = torch.cos(angle), torch.sin(angle)
    rot_matrix = torch.cat([cos_angle, -sin_angle, sin_angle, cos_angle],
                           dim=-1).reshape(*angle.shape[:-1], 2, 2)
    wh = distance[..., :2] + distance[..., 2:]
    offset_t = (distance[..., 2:] - distance[..., :2]) / 2
    offset_t = offset_t.unsqueeze(-1)
    offset = torch.matmul(rot_matrix, offset_t).squeeze(-1)
    ctr = points[..., :2] + offset
    angle_regular = norm_angle(angle)
    return torch.cat([ctr, wh, angle_regular], dim=-1)


# ---- model: FCOS-style head with norm_on_bbox, centerness_on_reg ----
class Scale(nn.Module):
    def __init__(self, scale=1.0):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(scale, dtype=torch.float))

    def forward(self, x):
        return x * self.scale


class RotatedFCOS(nn.Module):
    def __init__(self, ch=32):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(1, ch, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(ch, ch, 3, stride=2, padding=1), nn.ReLU())
        self.cls_convs = nn.Sequential(nn.Conv2d(ch, ch, 3, padding=1), nn.GroupNorm(8, ch), nn.ReLU())
        self.reg_convs = nn.Sequential(nn.Conv2d(ch, ch, 3, padding=1), nn.GroupNorm(8, ch), nn.ReLU())
        self.conv_cls = nn.Conv2d(ch, 1, 3, padding=1)
        self.conv_reg = nn.Conv2d(ch, 4, 3, padding=1)
        self.conv_angle = nn.Conv2d(ch, 1, 3, padding=1)
        self.conv_centerness = nn.Conv2d(ch, 1, 3, padding=1)
        self.scale = Scale(1.0)
        self.scale_angle = Scale(1.0)
        for m in [self.conv_cls, self.conv_reg, self.conv_angle, self.conv_centerness]:
            nn.init.normal_(m.weight, std=0.01)
            nn.init.constant_(m.bias, 0)
        nn.init.constant_(self.conv_cls.bias, -math.log((1 - 0.01) / 0.01))

    def forward(self, x):
        feat = self.backbone(x)
        cls_feat = self.cls_convs(feat)
        reg_feat = self.reg_convs(feat)
        cls_score = self.conv_cls(cls_feat)
        bbox_pred = self.scale(self.conv_reg(reg_feat)).float()
        bbox_pred = bbox_pred.clamp(min=0)
        angle_pred = self.scale_angle(self.conv_angle(reg_feat)).float()
        centerness = self.conv_centerness(reg_feat)
        return cls_score, bbox_pred, angle_pred, centerness


# ---- synthetic data: one rotated rectangle per image ----
def make_data(n, rng):
    imgs = np.zeros((n, 1, SIZE, SIZE), np.float32)
    boxes = np.zeros((n, 5), np.float32)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE] + 0.5
    for i in range(n):
        cx, cy = rng.uniform(10, 22, 2)
        w, h = rng.uniform(10, 20), rng.uniform(4, 9)
        a = rng.uniform(-math.pi / 4, math.pi / 4)
        dx, dy = xx - cx, yy - cy
        u = dx * math.cos(a) + dy * math.sin(a)
        v = -dx * math.sin(a) + dy * math.cos(a)
        inside = (np.abs(u) < w / 2) & (np.abs(v) < h / 2)
        imgs[i, 0] = inside * 1.0 + rng.normal(0, 0.3, (SIZE, SIZE))
        boxes[i] = (cx, cy, w, h, a)
    return torch.from_numpy(imgs), torch.from_numpy(boxes)


FEAT = SIZE // STRIDE
ys, xs = torch.meshgrid(torch.arange(FEAT), torch.arange(FEAT), indexing='ij')
POINTS = torch.stack([xs.reshape(-1), ys.reshape(-1)], -1).float() * STRIDE + STRIDE // 2


def get_targets(boxes):
    """labels (B, P), distance targets l,t,r,b in stride units (B, P, 4), angle (B, P, 1)."""
    cx, cy, w, h, a = [boxes[:, i:i + 1] for i in range(5)]
    dx = POINTS[None, :, 0] - cx
    dy = POINTS[None, :, 1] - cy
    u = dx * torch.cos(a) + dy * torch.sin(a)
    v = -dx * torch.sin(a) + dy * torch.cos(a)
    left, right = w / 2 + u, w / 2 - u
    top, bottom = h / 2 + v, h / 2 - v
    dist = torch.stack([left, top, right, bottom], -1)
    labels = dist.min(-1).values > 0
    return labels, dist / STRIDE, a[:, :, None].expand(-1, POINTS.shape[0], 1)


def centerness_target(pos_bbox_targets):
    left_right = pos_bbox_targets[:, [0, 2]]
    top_bottom = pos_bbox_targets[:, [1, 3]]
    c = (left_right.min(dim=-1)[0] / left_right.max(dim=-1)[0]) * (
        top_bottom.min(dim=-1)[0] / top_bottom.max(dim=-1)[0])
    return torch.sqrt(c)


def sigmoid_focal_loss(pred, target, gamma=2.0, alpha=0.25):
    p = pred.sigmoid()
    pt = (1 - p) * target + p * (1 - target)
    w = (alpha * target + (1 - alpha) * (1 - target)) * pt.pow(gamma)
    return F.binary_cross_entropy_with_logits(pred, target, reduction='none') * w


def head_losses(model, imgs, boxes, loss_bbox):
    cls_score, bbox_pred, angle_pred, centerness = model(imgs)
    labels, bbox_targets, angle_targets = get_targets(boxes)
    flat_cls = cls_score.permute(0, 2, 3, 1).reshape(-1)
    flat_bbox = bbox_pred.permute(0, 2, 3, 1).reshape(-1, 4)
    flat_angle = angle_pred.permute(0, 2, 3, 1).reshape(-1, 1)
    flat_ctr = centerness.permute(0, 2, 3, 1).reshape(-1)
    flat_labels = labels.reshape(-1)
    flat_bbox_t = bbox_targets.reshape(-1, 4)
    flat_angle_t = angle_targets.reshape(-1, 1)
    flat_points = (POINTS / STRIDE).repeat(imgs.shape[0], 1)
    pos_inds = flat_labels.nonzero().reshape(-1)
    num_pos = max(float(len(pos_inds)), 1.0)
    loss_cls = sigmoid_focal_loss(flat_cls, flat_labels.float()).sum() / num_pos
    pos_centerness_targets = centerness_target(flat_bbox_t[pos_inds])
    centerness_denorm = max(pos_centerness_targets.sum().item(), 1e-6)
    pos_points = flat_points[pos_inds]
    pos_decoded_bbox_preds = distance2obb(
        pos_points, torch.cat([flat_bbox[pos_inds], flat_angle[pos_inds]], -1))
    pos_decoded_target_preds = distance2obb(
        pos_points, torch.cat([flat_bbox_t[pos_inds], flat_angle_t[pos_inds]], -1))
    loss_box = loss_bbox(pos_decoded_bbox_preds, pos_decoded_target_preds,
                         weight=pos_centerness_targets, avg_factor=centerness_denorm)
    loss_centerness = F.binary_cross_entropy_with_logits(
        flat_ctr[pos_inds], pos_centerness_targets, reduction='sum') / num_pos
    return loss_cls, loss_box, loss_centerness, pos_decoded_bbox_preds, pos_decoded_target_preds


def main():
    rng = np.random.default_rng(0)
    train_x, train_b = make_data(512, rng)
    val_x, val_b = make_data(128, rng)
    model = RotatedFCOS()
    loss_bbox = GDLoss('gwd', loss_weight=5.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    batch = 32
    for epoch in range(6):
        model.train()
        perm = torch.randperm(len(train_x))
        sums = np.zeros(3)
        n_bad_norm = 0
        for it in range(len(train_x) // batch):
            idx = perm[it * batch:(it + 1) * batch]
            loss_cls, loss_box, loss_ctr, _, _ = head_losses(model, train_x[idx], train_b[idx], loss_bbox)
            loss = loss_cls + loss_box + loss_ctr
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=35, norm_type=2)
            optimizer.step()
            sums += [loss_cls.item(), loss_box.item(), loss_ctr.item()]
            n_bad_norm += int(not torch.isfinite(grad_norm))
        n_it = len(train_x) // batch
        model.eval()
        with torch.no_grad():
            _, vbox, _, pred, tgt = head_losses(model, val_x, val_b, loss_bbox)
            ctr_err = (pred[:, :2] - tgt[:, :2]).norm(dim=-1).mean().item() * STRIDE
            wh_err = (pred[:, 2:4] - tgt[:, 2:4]).abs().mean().item() * STRIDE
        bad = sum(int((~torch.isfinite(p)).sum()) for p in model.parameters())
        print(f'epoch {epoch}: loss_cls {sums[0] / n_it:.4f} loss_bbox {sums[1] / n_it:.4f} '
              f'loss_centerness {sums[2] / n_it:.4f} | val loss_bbox {vbox.item():.4f} '
              f'center err {ctr_err:.2f}px wh err {wh_err:.2f}px | non-finite grad norm in {n_bad_norm}/{n_it} '
              f'steps, non-finite params {bad}')


if __name__ == '__main__':
    main()
