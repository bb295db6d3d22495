# Source: megvii-research/mdistiller, mdistiller/distillers/DKD.py + distillers/_base.py + engine/trainer.py +
# engine/utils.py + models/cifar/resnet.py + tools/train.py, commit a08d46f10d6102bd6e3f258ca5ac880b020ea259
# https://github.com/megvii-research/mdistiller
#
# Decoupled Knowledge Distillation (CVPR 2022) as trained by mdistiller: the teacher lives INSIDE the distiller
# module (its parameters keep requires_grad=True but only the student's go to SGD through
# get_learnable_parameters()), Distiller.train() forces teacher.eval(), teacher logits under no_grad, target /
# non-target KD split with scatter_ masks and a "- 1000.0 * gt_mask" logit mask, KD weight warmed up with
# min(epoch / WARMUP, 1), F.kl_div(size_average=False) / batch, the losses summed as l.mean() of a dict, the whole
# distiller wrapped in DataParallel, step-wise LR decay per epoch.
# Adaptation: CIFAR-100 and the downloaded resnet32x4 teacher checkpoint are unavailable, so 20-class synthetic
# 16x16 images are generated and the teacher (resnet14, widths 16-64) is trained here with plain CE before
# distillation (replacing load_checkpoint); student resnet8 (widths 8-32); avgpool 8 -> 4 for 16x16 inputs;
# EPOCHS 240 -> 6, LR_DECAY_STAGES [150,180,210] -> [4,5], WARMUP 20 -> 3, batch 64; no tqdm, tensorboard,
# wandb or checkpoints; .cuda() calls dropped (DataParallel runs the module directly without GPUs).
import time
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset


class CN(dict):
    __getattr__ = dict.__getitem__


CFG = CN(
    DISTILLER=CN(TYPE="DKD", TEACHER="resnet14", STUDENT="resnet8"),
    SOLVER=CN(BATCH_SIZE=64, EPOCHS=6, LR=0.05, LR_DECAY_STAGES=[4, 5], LR_DECAY_RATE=0.1,
              WEIGHT_DECAY=0.0005, MOMENTUM=0.9, TYPE="SGD"),
    DKD=CN(CE_WEIGHT=1.0, ALPHA=1.0, BETA=8.0, T=4.0, WARMUP=3),
)


# ------------------------------------------------------------------------------ models/cifar/resnet.py
def conv3x3(in_planes, out_planes, stride=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(
        in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False
    )


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, is_last=False):
        super(BasicBlock, self).__init__()
        self.is_last = is_last
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        preact = out
        out = F.relu(out)
        if self.is_last:
            return out, preact
        else:
            return out


class ResNet(nn.Module):
    def __init__(self, depth, num_filters, block_name="BasicBlock", num_classes=10):
        super(ResNet, self).__init__()
        assert (depth - 2) % 6 == 0, "When use basicblock, depth should be 6n+2, e.g. 20, 32, 44, 56, 110, 1202"
        n = (depth - 2) // 6
        block = BasicBlock

        self.inplanes = num_filters[0]
        self.conv1 = nn.Conv2d(3, num_filters[0], kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(num_filters[0])
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, num_filters[1], n)
        self.layer2 = self._make_layer(block, num_filters[2], n, stride=2)
        self.layer3 = self._make_layer(block, num_filters[3], n, stride=2)
        self.avgpool = nn.AvgPool2d(4)
        self.fc = nn.Linear(num_filters[3] * block.expansion, num_classes)
        self.stage_channels = num_filters

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )

        layers = list([])
        layers.append(
            block(self.inplanes, planes, stride, downsample, is_last=(blocks == 1))
        )
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(block(self.inplanes, planes, is_last=(i == blocks - 1)))

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        f0 = x

        x, f1_pre = self.layer1(x)
        f1 = x
        x, f2_pre = self.layer2(x)
        f2 = x
        x, f3_pre = self.layer3(x)
        f3 = x

        x = self.avgpool(x)
        avg = x.reshape(x.size(0), -1)
        out = self.fc(avg)

        feats = {}
        feats["feats"] = [f0, f1, f2, f3]
        feats["preact_feats"] = [f0, f1_pre, f2_pre, f3_pre]
        feats["pooled_feat"] = avg

        return out, feats


def resnet14(**kwargs):
    return ResNet(14, [16, 16, 32, 64], "basicblock", **kwargs)


def resnet8(**kwargs):
    return ResNet(8, [8, 8, 16, 32], "basicblock", **kwargs)


# ---------------------------------------------------------------------------------- distillers/_base.py
class Distiller(nn.Module):
    def __init__(self, student, teacher):
        super(Distiller, self).__init__()
        self.student = student
        self.teacher = teacher

    def train(self, mode=True):
        # teacher as eval mode by default
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        self.teacher.eval()
        return self

    def get_learnable_parameters(self):
        # if the method introduces extra parameters, re-impl this function
        return [v for k, v in self.student.named_parameters()]

    def forward_train(self, **kwargs):
        raise NotImplementedError()

    def forward_test(self, image):
        return self.student(image)[0]

    def forward(self, **kwargs):
        if self.training:
            return self.forward_train(**kwargs)
        return self.forward_test(kwargs["image"])


# ------------------------------------------------------------------------------------- distillers/DKD.py
def dkd_loss(logits_student, logits_teacher, target, alpha, beta, temperature):
    gt_mask = _get_gt_mask(logits_student, target)
    other_mask = _get_other_mask(logits_student, target)
    pred_student = F.softmax(logits_student / temperature, dim=1)
    pred_teacher = F.softmax(logits_teacher / temperature, dim=1)
    pred_student = cat_mask(pred_student, gt_mask, other_mask)
    pred_teacher = cat_mask(pred_teacher, gt_mask, other_mask)
    log_pred_student = torch.log(pred_student)
    tckd_loss = (
        F.kl_div(log_pred_student, pred_teacher, size_average=False)
        * (temperature**2)
        / target.shape[0]
    )
    pred_teacher_part2 = F.softmax(
        logits_teacher / temperature - 1000.0 * gt_mask, dim=1
    )
    log_pred_student_part2 = F.log_softmax(
        logits_student / temperature - 1000.0 * gt_mask, dim=1
    )
    nckd_loss = (
        F.kl_div(log_pred_student_part2, pred_teacher_part2, size_average=False)
        * (temperature**2)
        / target.shape[0]
    )
    return alpha * tckd_loss + beta * nckd_loss


def _get_gt_mask(logits, target):
    target = target.reshape(-1)
    mask = torch.zeros_like(logits).scatter_(1, target.unsqueeze(1), 1).bool()
    return mask


def _get_other_mask(logits, target):
    target = target.reshape(-1)
    mask = torch.ones_like(logits).scatter_(1, target.unsqueeze(1), 0).bool()
    return mask


def cat_mask(t, mask1, mask2):
    t1 = (t * mask1).sum(dim=1, keepdims=True)
    t2 = (t * mask2).sum(1, keepdims=True)
    rt = torch.cat([t1, t2], dim=1)
    return rt


class DKD(Distiller):
    """Decoupled Knowledge Distillation(CVPR 2022)"""

    def __init__(self, student, teacher, cfg):
        super(DKD, self).__init__(student, teacher)
        self.ce_loss_weight = cfg.DKD.CE_WEIGHT
        self.alpha = cfg.DKD.ALPHA
        self.beta = cfg.DKD.BETA
        self.temperature = cfg.DKD.T
        self.warmup = cfg.DKD.WARMUP

    def forward_train(self, image, target, **kwargs):
        logits_student, _ = self.student(image)
        with torch.no_grad():
            logits_teacher, _ = self.teacher(image)

        # losses
        loss_ce = self.ce_loss_weight * F.cross_entropy(logits_student, target)
        loss_dkd = min(kwargs["epoch"] / self.warmup, 1.0) * dkd_loss(
            logits_student,
            logits_teacher,
            target,
            self.alpha,
            self.beta,
            self.temperature,
        )
        losses_dict = {
            "loss_ce": loss_ce,
            "loss_kd": loss_dkd,
        }
        return logits_student, losses_dict


# --------------------------------------------------------------------------------------- engine/utils.py
class AverageMeter(object):
    """Computes and stores the average and current value"""

    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def accuracy(output, target, topk=(1,)):
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.reshape(1, -1).expand_as(pred))
        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


def validate(val_loader, distiller):
    losses, top1, top5 = [AverageMeter() for _ in range(3)]
    criterion = nn.CrossEntropyLoss()
    distiller.eval()
    with torch.no_grad():
        for idx, (image, target) in enumerate(val_loader):
            image = image.float()
            output = distiller(image=image)
            loss = criterion(output, target)
            acc1, acc5 = accuracy(output, target, topk=(1, 5))
            batch_size = image.size(0)
            losses.update(loss.cpu().detach().numpy().mean(), batch_size)
            top1.update(acc1[0], batch_size)
            top5.update(acc5[0], batch_size)
    return top1.avg, top5.avg, losses.avg


def adjust_learning_rate(epoch, cfg, optimizer):
    steps = np.sum(epoch > np.asarray(cfg.SOLVER.LR_DECAY_STAGES))
    if steps > 0:
        new_lr = cfg.SOLVER.LR * (cfg.SOLVER.LR_DECAY_RATE**steps)
        for param_group in optimizer.param_groups:
            param_group["lr"] = new_lr
        return new_lr
    return cfg.SOLVER.LR


# ------------------------------------------------------------------------------------- engine/trainer.py
class BaseTrainer(object):
    def __init__(self, experiment_name, distiller, train_loader, val_loader, cfg):
        self.cfg = cfg
        self.distiller = distiller
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.optimizer = self.init_optimizer(cfg)
        self.best_acc = -1
        self.history = []

    def init_optimizer(self, cfg):
        if cfg.SOLVER.TYPE == "SGD":
            optimizer = optim.SGD(
                self.distiller.module.get_learnable_parameters(),
                lr=cfg.SOLVER.LR,
                momentum=cfg.SOLVER.MOMENTUM,
                weight_decay=cfg.SOLVER.WEIGHT_DECAY,
            )
        else:
            raise NotImplementedError(cfg.SOLVER.TYPE)
        return optimizer

    def train(self, resume=False):
        epoch = 1
        while epoch < self.cfg.SOLVER.EPOCHS + 1:
            self.train_epoch(epoch)
            epoch += 1
        print("[EVAL] Best accuracy:{}".format(self.best_acc))

    def train_epoch(self, epoch):
        lr = adjust_learning_rate(epoch, self.cfg, self.optimizer)
        train_meters = {
            "training_time": AverageMeter(),
            "data_time": AverageMeter(),
            "losses": AverageMeter(),
            "top1": AverageMeter(),
            "top5": AverageMeter(),
        }

        # train loops
        self.distiller.train()
        for idx, data in enumerate(self.train_loader):
            msg = self.train_iter(data, epoch, train_meters)
        print("[TRAIN] " + msg)

        # validate
        test_acc, test_acc_top5, test_loss = validate(self.val_loader, self.distiller)

        # log
        log_dict = OrderedDict(
            {
                "train_acc": train_meters["top1"].avg,
                "train_loss": train_meters["losses"].avg,
                "test_acc": test_acc,
                "test_acc_top5": test_acc_top5,
                "test_loss": test_loss,
            }
        )
        print("[EVAL] epoch {} lr {:.4f} test_acc {:.2f} test_loss {:.4f}".format(
            epoch, lr, float(test_acc), float(test_loss)))
        self.history.append(float(test_acc))
        if log_dict["test_acc"] > self.best_acc:
            self.best_acc = log_dict["test_acc"]

    def train_iter(self, data, epoch, train_meters):
        self.optimizer.zero_grad()
        train_start_time = time.time()
        image, target, index = data
        train_meters["data_time"].update(time.time() - train_start_time)
        image = image.float()

        # forward
        preds, losses_dict = self.distiller(image=image, target=target, epoch=epoch)

        # backward
        loss = sum([l.mean() for l in losses_dict.values()])
        loss.backward()
        self.optimizer.step()
        train_meters["training_time"].update(time.time() - train_start_time)
        # collect info
        batch_size = image.size(0)
        acc1, acc5 = accuracy(preds, target, topk=(1, 5))
        train_meters["losses"].update(loss.cpu().detach().numpy().mean(), batch_size)
        train_meters["top1"].update(acc1[0], batch_size)
        train_meters["top5"].update(acc5[0], batch_size)
        msg = "Epoch:{}| Time(data):{:.3f}| Time(train):{:.3f}| Loss:{:.4f}| Top-1:{:.3f}| Top-5:{:.3f}".format(
            epoch,
            train_meters["data_time"].avg,
            train_meters["training_time"].avg,
            train_meters["losses"].avg,
            train_meters["top1"].avg,
            train_meters["top5"].avg,
        )
        return msg


# ------------------------------------------------------------------------------------------- dataset
class SyntheticCIFAR(Dataset):
    """CIFAR-like 16x16 images: a smooth class prototype, a random shift and noise. Train returns the index."""

    def __init__(self, n, num_classes=20, train=True, seed=0):
        g = torch.Generator().manual_seed(1234)
        protos = F.interpolate(torch.randn(num_classes, 3, 4, 4, generator=g), size=16, mode="bilinear",
                               align_corners=False)
        g = torch.Generator().manual_seed(seed)
        self.targets = torch.randint(0, num_classes, (n,), generator=g)
        shifts = torch.randint(-2, 3, (n, 2), generator=g)
        imgs = protos[self.targets] + 0.8 * torch.randn(n, 3, 16, 16, generator=g)
        self.data = torch.stack([torch.roll(im, (int(s[0]), int(s[1])), (1, 2)) for im, s in zip(imgs, shifts)])
        self.train = train

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        if self.train:
            return self.data[index], self.targets[index], index
        return self.data[index], self.targets[index]


def pretrain_teacher(model, loader, epochs=3):
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    model.train()
    for _ in range(epochs):
        for image, target, _ in loader:
            opt.zero_grad()
            F.cross_entropy(model(image)[0], target).backward()
            opt.step()
    return model


def main():
    torch.manual_seed(0)
    cfg = CFG
    train_set, val_set = SyntheticCIFAR(2000, seed=0), SyntheticCIFAR(500, train=False, seed=1)
    train_loader = DataLoader(train_set, batch_size=cfg.SOLVER.BATCH_SIZE, shuffle=True, num_workers=0)
    val_loader = DataLoader(val_set, batch_size=100, shuffle=False, num_workers=0)
    num_classes = 20

    print("[INFO] Loading teacher model")
    model_teacher = pretrain_teacher(resnet14(num_classes=num_classes), train_loader)
    model_student = resnet8(num_classes=num_classes)
    distiller = DKD(model_student, model_teacher, cfg)
    distiller = torch.nn.DataParallel(distiller)
    t_acc, _, _ = validate(val_loader, torch.nn.DataParallel(Distiller(model_teacher, model_teacher)))
    print("[INFO] teacher test_acc {:.2f}".format(float(t_acc)))

    trainer = BaseTrainer("dkd,res14,res8", distiller, train_loader, val_loader, cfg)
    trainer.train()
    h = trainer.history
    print(f"[summary] student test_acc first={h[0]:.2f} last={h[-1]:.2f} increased={h[-1] > h[0]}")


if __name__ == "__main__":
    main()
