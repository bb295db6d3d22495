# Source: sshaoshuai/Pointnet2.PyTorch, tools/train_and_eval.py, tools/pointnet2_msg.py, commit fce17c2a2df2abf586c4471ad9e0d54f090c8fea
# Report: https://github.com/sshaoshuai/Pointnet2.PyTorch/issues/28
# Foreground point segmentation (KITTI) with PointNet++ MSG, DiceLoss, Adam + LambdaLR step decay,
# clip_grad_norm and a foreground-IoU evaluation every ckpt_save_interval epochs. The CUDA
# set-abstraction / feature-propagation modules are replaced by a CPU per-point MLP with a
# max-pooled global feature; the classification head (Conv1d+BN, Dropout 0.5, Conv1d) is kept.
# KITTI scans are replaced by synthetic scenes: ground plane, clutter and 1-2 box-shaped cars.
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.optim.lr_scheduler as lr_sched
from torch.nn.utils import clip_grad_norm_
from torch.utils.data import DataLoader, Dataset


class Args:
    batch_size = 8
    epochs = 12
    ckpt_save_interval = 2
    lr = 0.002
    lr_decay = 0.2
    lr_clip = 0.000001
    decay_step_list = [8, 10]
    weight_decay = 0.001


args = Args()

FG_THRESH = 0.3
CLS_FC = [64]


def log_print(info, log_f=None):
    print(info)
    if log_f is not None:
        print(info, file=log_f)


class Conv1d(nn.Sequential):
    """pointnet2.pytorch_utils.Conv1d: conv, optional BatchNorm, optional activation."""

    def __init__(self, in_size, out_size, bn=False, activation=nn.ReLU(inplace=True)):
        super().__init__()
        self.add_module('conv', nn.Conv1d(in_size, out_size, kernel_size=1, bias=not bn))
        if bn:
            self.add_module('bn', nn.BatchNorm1d(out_size))
        if activation is not None:
            self.add_module('activation', activation)


class PointnetLite(nn.Module):
    def __init__(self, input_channels=0):
        super().__init__()
        self.local_mlp = nn.Sequential(Conv1d(3 + input_channels, 32, bn=True), Conv1d(32, 64, bn=True))
        self.global_mlp = nn.Sequential(Conv1d(64, 128, bn=True))
        self.fp_mlp = nn.Sequential(Conv1d(64 + 128, 128, bn=True))

        cls_layers = []
        pre_channel = 128
        for k in range(0, CLS_FC.__len__()):
            cls_layers.append(Conv1d(pre_channel, CLS_FC[k], bn=True))
            pre_channel = CLS_FC[k]
        cls_layers.append(Conv1d(pre_channel, 1, activation=None))
        cls_layers.insert(1, nn.Dropout(0.5))
        self.cls_layer = nn.Sequential(*cls_layers)

    def forward(self, pointcloud):
        xyz = pointcloud[..., 0:3].transpose(1, 2).contiguous()  # (B, 3, N)
        local = self.local_mlp(xyz)
        glob = self.global_mlp(local).max(dim=2, keepdim=True)[0].expand(-1, -1, local.shape[2])
        features = self.fp_mlp(torch.cat([local, glob], dim=1))
        pred_cls = self.cls_layer(features).transpose(1, 2).contiguous()  # (B, N, 1)
        return pred_cls


def get_model(input_channels=0):
    return PointnetLite(input_channels=input_channels)


class SceneDataset(Dataset):
    def __init__(self, n_scenes, npoints, seed):
        rng = np.random.RandomState(seed)
        self.pts, self.labels = [], []
        for _ in range(n_scenes):
            ground = np.c_[rng.uniform(-20, 20, (npoints, 2)), rng.normal(-1.7, 0.05, npoints)]
            labels = np.zeros(npoints, dtype=np.int64)
            start = 0
            for _ in range(rng.randint(1, 3)):
                n_car = npoints // 6
                cx, cy = rng.uniform(-15, 15, 2)
                car = np.c_[rng.uniform(cx - 2, cx + 2, n_car), rng.uniform(cy - 0.9, cy + 0.9, n_car),
                            rng.uniform(-1.6, -0.2, n_car)]
                ground[start:start + n_car] = car
                labels[start:start + n_car] = 1
                start += n_car
            clutter = rng.uniform(size=npoints) < 0.15
            ground[clutter & (labels == 0), 2] += rng.uniform(0, 2.5, (clutter & (labels == 0)).sum())
            perm = rng.permutation(npoints)
            self.pts.append((ground[perm] / np.array([20.0, 20.0, 2.0])).astype(np.float32))
            self.labels.append(labels[perm])

    def __len__(self):
        return len(self.pts)

    def __getitem__(self, index):
        return {'pts_input': self.pts[index], 'cls_labels': self.labels[index]}

    @staticmethod
    def collate_batch(batch):
        return {key: np.stack([b[key] for b in batch]) for key in batch[0]}


class DiceLoss(nn.Module):
    def __init__(self, ignore_target=-1):
        super().__init__()
        self.ignore_target = ignore_target

    def forward(self, input, target):
        """
        :param input: (N), logit
        :param target: (N), {0, 1}
        :return:
        """
        input = torch.sigmoid(input.view(-1))
        target = target.float().view(-1)
        mask = (target != self.ignore_target).float()
        return 1.0 - (torch.min(input, target) * mask).sum() / torch.clamp((torch.max(input, target) * mask).sum(), min=1.0)


def train_one_epoch(model, train_loader, optimizer, epoch, lr_scheduler, total_it, log_f):
    model.train()
    loss_func = DiceLoss(ignore_target=-1)
    losses, ious = [], []

    for it, batch in enumerate(train_loader):
        optimizer.zero_grad()

        pts_input, cls_labels = batch['pts_input'], batch['cls_labels']
        pts_input = torch.from_numpy(pts_input).float()
        cls_labels = torch.from_numpy(cls_labels).long().view(-1)

        pred_cls = model(pts_input)
        pred_cls = pred_cls.view(-1)

        loss = loss_func(pred_cls, cls_labels)
        loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

        total_it += 1

        pred_class = (torch.sigmoid(pred_cls) > FG_THRESH)
        fg_mask = cls_labels > 0
        correct = ((pred_class.long() == cls_labels) & fg_mask).float().sum()
        union = fg_mask.sum().float() + (pred_class > 0).sum().float() - correct
        iou = correct / torch.clamp(union, min=1.0)
        losses.append(loss.item())
        ious.append(iou.item())

    cur_lr = lr_scheduler.get_last_lr()[0]
    log_print('training epoch %d: total_it=%d, loss=%.5f, fg_iou=%.3f, lr=%f' %
              (epoch, total_it, np.mean(losses), np.mean(ious), cur_lr), log_f=log_f)
    return total_it


def eval_one_epoch(model, eval_loader, epoch, log_f=None):
    model.train()

    iou_list = []
    for it, batch in enumerate(eval_loader):
        pts_input, cls_labels = batch['pts_input'], batch['cls_labels']
        pts_input = torch.from_numpy(pts_input).float()
        cls_labels = torch.from_numpy(cls_labels).long().view(-1)

        pred_cls = model(pts_input)
        pred_cls = pred_cls.view(-1)

        pred_class = (torch.sigmoid(pred_cls) > FG_THRESH)
        fg_mask = cls_labels > 0
        correct = ((pred_class.long() == cls_labels) & fg_mask).float().sum()
        union = fg_mask.sum().float() + (pred_class > 0).sum().float() - correct
        iou = correct / torch.clamp(union, min=1.0)

        iou_list.append(iou.item())

    iou_list = np.array(iou_list)
    avg_iou = iou_list.mean()

    log_print('Epoch %d: Average IoU (samples=%d): %.6f' % (epoch, iou_list.__len__(), avg_iou), log_f=log_f)
    return avg_iou


def train_and_eval(model, train_loader, eval_loader, log_f):
    optimizer = optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    def lr_lbmd(cur_epoch):
        cur_decay = 1
        for decay_step in args.decay_step_list:
            if cur_epoch >= decay_step:
                cur_decay = cur_decay * args.lr_decay
        return max(cur_decay, args.lr_clip / args.lr)

    lr_scheduler = lr_sched.LambdaLR(optimizer, lr_lbmd)

    total_it = 0
    for epoch in range(1, args.epochs + 1):
        total_it = train_one_epoch(model, train_loader, optimizer, epoch, lr_scheduler, total_it, log_f)
        lr_scheduler.step()

        if epoch % args.ckpt_save_interval == 0:
            with torch.no_grad():
                eval_one_epoch(model, eval_loader, epoch, log_f)
    bn = model.local_mlp[0].bn
    log_print('final local_mlp.0.bn running_mean[:4] %s, num_batches_tracked %d' %
              (np.round(bn.running_mean[:4].numpy(), 4), bn.num_batches_tracked.item()))


if __name__ == '__main__':
    torch.manual_seed(0)
    model = get_model(input_channels=0)

    eval_set = SceneDataset(20, 1024, seed=2)
    eval_loader = DataLoader(eval_set, batch_size=args.batch_size, shuffle=False,
                             num_workers=0, collate_fn=eval_set.collate_batch)
    train_set = SceneDataset(96, 1024, seed=1)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True,
                              num_workers=0, collate_fn=train_set.collate_batch)
    train_and_eval(model, train_loader, eval_loader, log_f=None)
