# Report: https://github.com/open-mmlab/mmsegmentation/pull/1629
# Binary segmentation with an mmseg-style decode head (out_channels=1) trained with
# CrossEntropyLoss(use_sigmoid=True), i.e. mmseg's binary_cross_entropy with its one-hot label
# expansion and weighted reduction; prediction by sigmoid > threshold (0.3) and foreground IoU on
# a held-out split. The backbone is a small conv stack; the dataset is 13 synthetic 32x32 images
# with one bright blob each, loaded with batch size 4.
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def reduce_loss(loss, reduction):
    if reduction == 'none':
        return loss
    elif reduction == 'mean':
        return loss.mean()
    return loss.sum()


def weight_reduce_loss(loss, weight=None, reduction='mean', avg_factor=None):
    if weight is not None:
        assert weight.dim() == loss.dim()
        if weight.dim() > 1:
            assert weight.size(1) == 1 or weight.size(1) == loss.size(1)
        loss = loss * weight
    if avg_factor is None:
        loss = reduce_loss(loss, reduction)
    else:
        if reduction == 'mean':
            loss = loss.sum() / avg_factor
        elif reduction != 'none':
            raise ValueError('avg_factor can not be used with reduction="sum"')
    return loss


def _expand_onehot_labels(labels, label_weights, target_shape, ignore_index):
    """Expand onehot labels to match the size of prediction."""
    bin_labels = labels.new_zeros(target_shape)
    valid_mask = (labels >= 0) & (labels != ignore_index)
    inds = torch.nonzero(valid_mask, as_tuple=True)

    if inds[0].numel() > 0:
        if labels.dim() == 3:
            bin_labels[inds[0], labels[valid_mask], inds[1], inds[2]] = 1
        else:
            bin_labels[inds[0], labels[valid_mask]] = 1

    valid_mask = valid_mask.unsqueeze(1).expand(target_shape).float()

    if label_weights is None:
        bin_label_weights = valid_mask
    else:
        bin_label_weights = label_weights.unsqueeze(1).expand(target_shape)
        bin_label_weights = bin_label_weights * valid_mask

    return bin_labels, bin_label_weights, valid_mask


def binary_cross_entropy(pred,
                         label,
                         weight=None,
                         reduction='mean',
                         avg_factor=None,
                         class_weight=None,
                         ignore_index=-100,
                         avg_non_ignore=False,
                         **kwargs):
    if pred.size(1) == 1:
        # For binary class segmentation, the shape of pred is
        # [N, 1, H, W] and that of label is [N, H, W].
        assert label.max() <= 1, \
            'For pred with shape [N, 1, H, W], its label must have at ' \
            'most 2 classes'
        pred = pred.squeeze()
    if pred.dim() != label.dim():
        assert (pred.dim() == 2 and label.dim() == 1) or (
                pred.dim() == 4 and label.dim() == 3), \
            'Only pred shape [N, C], label shape [N] or pred shape [N, C, ' \
            'H, W], label shape [N, H, W] are supported'
        # `weight` returned from `_expand_onehot_labels`
        # has been treated for valid (non-ignore) pixels
        label, weight, valid_mask = _expand_onehot_labels(
            label, weight, pred.shape, ignore_index)
    else:
        # should mask out the ignored elements
        valid_mask = ((label >= 0) & (label != ignore_index)).float()
        if weight is not None:
            weight = weight * valid_mask
        else:
            weight = valid_mask
    # average loss over non-ignored and valid elements
    if reduction == 'mean' and avg_factor is None and avg_non_ignore:
        avg_factor = valid_mask.sum().item()

    loss = F.binary_cross_entropy_with_logits(
        pred, label.float(), pos_weight=class_weight, reduction='none')
    # do the reduction for the weighted loss
    loss = weight_reduce_loss(
        loss, weight, reduction=reduction, avg_factor=avg_factor)

    return loss


class CrossEntropyLoss(nn.Module):
    def __init__(self, use_sigmoid=False, reduction='mean', loss_weight=1.0,
                 loss_name='loss_ce', avg_non_ignore=False):
        super().__init__()
        self.use_sigmoid = use_sigmoid
        self.reduction = reduction
        self.loss_weight = loss_weight
        self.avg_non_ignore = avg_non_ignore
        self.cls_criterion = binary_cross_entropy if use_sigmoid else None
        self._loss_name = loss_name

    def forward(self, cls_score, label, weight=None, avg_factor=None,
                reduction_override=None, ignore_index=-100, **kwargs):
        reduction = (
            reduction_override if reduction_override else self.reduction)
        loss_cls = self.loss_weight * self.cls_criterion(
            cls_score,
            label,
            weight,
            class_weight=None,
            reduction=reduction,
            avg_factor=avg_factor,
            avg_non_ignore=self.avg_non_ignore,
            ignore_index=ignore_index,
            **kwargs)
        return loss_cls


class FCNHead(nn.Module):
    """Backbone stand-in + FCN decode head; cls_seg maps channels to out_channels."""

    def __init__(self, in_channels=3, channels=16, out_channels=1, threshold=0.3):
        super().__init__()
        self.out_channels = out_channels
        self.threshold = threshold
        self.convs = nn.Sequential(
            nn.Conv2d(in_channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=2, dilation=2), nn.BatchNorm2d(channels), nn.ReLU(),
        )
        self.dropout = nn.Dropout2d(0.1)
        self.conv_seg = nn.Conv2d(channels, out_channels, kernel_size=1)
        self.loss_decode = CrossEntropyLoss(use_sigmoid=True, loss_weight=1.0, avg_non_ignore=True)

    def forward(self, img):
        return self.conv_seg(self.dropout(self.convs(img)))

    def losses(self, seg_logit, seg_label):
        loss = dict()
        seg_label = seg_label.squeeze(1)
        loss['loss_ce'] = self.loss_decode(seg_logit, seg_label, ignore_index=255)
        return loss

    def predict(self, seg_logit):
        return (seg_logit.sigmoid() > self.threshold).to(seg_logit).squeeze(1)


def make_images(n, gen, size=32):
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing='ij')
    imgs, segs = [], []
    for _ in range(n):
        cy, cx = torch.randint(8, size - 8, (2,), generator=gen).tolist()
        r = int(torch.randint(4, 8, (1,), generator=gen))
        mask = ((yy - cy) ** 2 + (xx - cx) ** 2 <= r * r).long()
        img = 0.6 * torch.randn(3, size, size, generator=gen) + mask.float() * torch.tensor([1.0, 0.5, -0.5]).view(3, 1, 1)
        imgs.append(img)
        segs.append(mask.unsqueeze(0))
    return torch.stack(imgs), torch.stack(segs)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    train_img, train_seg = make_images(13, gen)
    val_img, val_seg = make_images(16, gen)
    train_set = torch.utils.data.TensorDataset(train_img, train_seg)
    loader = torch.utils.data.DataLoader(train_set, batch_size=4, shuffle=True,
                                         generator=torch.Generator().manual_seed(1))
    model = FCNHead()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    t0 = time.time()
    for epoch in range(1, 13):
        model.train()
        total, n = 0.0, 0
        for img, gt_semantic_seg in loader:
            seg_logit = model(img)
            losses = model.losses(seg_logit, gt_semantic_seg)
            loss = sum(v for k, v in losses.items() if 'loss' in k)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * img.size(0)
            n += img.size(0)
        model.eval()
        with torch.no_grad():
            pred = model.predict(model(val_img))
            gt = val_seg.squeeze(1).float()
            inter = (pred * gt).sum().item()
            union = ((pred + gt) > 0).float().sum().item()
        print(f"epoch {epoch} loss_ce {total / n:.4f} val fg IoU {inter / union:.4f}")
    print(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
