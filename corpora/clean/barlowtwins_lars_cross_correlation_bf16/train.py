# Source: facebookresearch/barlowtwins, main.py, commit 8e8d284ca0bc02f88b92328e53f9b901e86b4a3c
# https://github.com/facebookresearch/barlowtwins/blob/main/main.py
#
# Barlow Twins: cross-correlation of affine-free-BN'd embeddings, in-place c.div_ / diagonal add_/pow_ on the
# loss graph, hand-written LARS optimizer (biases and norms excluded from weight decay and adaptation, lr
# starts at exactly 0 on step 0 of the warmup), two param groups whose LRs are written every step, mixed
# precision with a GradScaler, zero_init_residual backbone with fc = Identity.
# Adaptation: one CPU process: NCCL/DDP/SyncBN and all_reduce(c) are dropped (world size 1, so all_reduce is the
# identity); torch.cuda.amp.autocast/GradScaler -> torch.autocast("cpu", bfloat16) + torch.amp.GradScaler("cpu");
# torchvision ResNet-50 -> 3-stage BasicBlock ResNet (width 16, 64-d output) with zero_init_residual;
# ImageNet + PIL transforms -> 512 synthetic 16x16 images with tensor augmentations; projector 8192-8192-8192 ->
# 128-128-128; batch 2048 -> 64; epochs 1000 -> 6 with 1 warmup epoch instead of 10; learning-rate-weights/biases 0.2/0.0048 -> 5.0/0.12
# (25x, for so few steps); no checkpoint / stats files, SIGUSR1 handlers removed.
import math
import random

import torch
import torch.nn.functional as F
from torch import nn, optim


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision.models.resnet.ResNet reduced in width/depth (BasicBlock, layers [1, 1, 1], base width 16)."""

    def __init__(self, layers=(1, 1, 1), num_classes=1000, zero_init_residual=False, width=16):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(width, layers[0])
        self.layer2 = self._make_layer(width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(width * 4, layers[2], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 4, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, BasicBlock):
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        for _ in range(1, blocks):
            layers.append(BasicBlock(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(num_classes=1000, zero_init_residual=False, **kwargs):
    return ResNet((1, 1, 1), num_classes=num_classes, zero_init_residual=zero_init_residual)


class SyntheticImages(torch.utils.data.Dataset):
    """Stand-in for ImageFolder: 16x16 RGB images drawn around 10 class prototypes (label returned, unused)."""

    def __init__(self, n=512, num_classes=10, size=16, transform=None, seed=0):
        g = torch.Generator().manual_seed(seed)
        protos = torch.rand(num_classes, 3, size, size, generator=g)
        protos = F.avg_pool2d(protos, 3, 1, 1)  # smooth "objects"
        self.targets = torch.randint(0, num_classes, (n,), generator=g)
        self.data = (protos[self.targets] + 0.15 * torch.randn(n, 3, size, size, generator=g)).clamp(0, 1)
        self.transform = transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        img = self.data[i]
        return (self.transform(img) if self.transform else img), int(self.targets[i])


class RandomAugment:
    """Tensor stand-in for RandomResizedCrop + ColorJitter + HorizontalFlip + Normalize."""

    def __call__(self, x):
        pad = F.pad(x.unsqueeze(0), (2, 2, 2, 2), mode="replicate")[0]
        i, j = random.randint(0, 4), random.randint(0, 4)
        x = pad[:, i:i + x.shape[1], j:j + x.shape[2]]
        if random.random() < 0.5:
            x = x.flip(-1)
        if random.random() < 0.8:
            x = x * (0.6 + 0.8 * random.random()) + (random.random() - 0.5) * 0.4
        return (x - 0.5) / 0.25


class TwoCropsTransform:
    """Take two random crops of one image as the query and key."""

    def __init__(self, base_transform):
        self.base_transform = base_transform

    def __call__(self, x):
        q = self.base_transform(x)
        k = self.base_transform(x)
        return [q, k]


def adjust_learning_rate(args, optimizer, loader, step):
    max_steps = args.epochs * len(loader)
    warmup_steps = 1 * len(loader)
    base_lr = args.batch_size / 256
    if step < warmup_steps:
        lr = base_lr * step / warmup_steps
    else:
        step -= warmup_steps
        max_steps -= warmup_steps
        q = 0.5 * (1 + math.cos(math.pi * step / max_steps))
        end_lr = base_lr * 0.001
        lr = base_lr * q + end_lr * (1 - q)
    optimizer.param_groups[0]['lr'] = lr * args.learning_rate_weights
    optimizer.param_groups[1]['lr'] = lr * args.learning_rate_biases


def off_diagonal(x):
    # return a flattened view of the off-diagonal elements of a square matrix
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


class BarlowTwins(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.backbone = resnet18(zero_init_residual=True)
        self.backbone.fc = nn.Identity()

        # projector
        sizes = [64] + list(map(int, args.projector.split('-')))
        layers = []
        for i in range(len(sizes) - 2):
            layers.append(nn.Linear(sizes[i], sizes[i + 1], bias=False))
            layers.append(nn.BatchNorm1d(sizes[i + 1]))
            layers.append(nn.ReLU(inplace=True))
        layers.append(nn.Linear(sizes[-2], sizes[-1], bias=False))
        self.projector = nn.Sequential(*layers)

        # normalization layer for the representations z1 and z2
        self.bn = nn.BatchNorm1d(sizes[-1], affine=False)

    def forward(self, y1, y2):
        z1 = self.projector(self.backbone(y1))
        z2 = self.projector(self.backbone(y2))

        # empirical cross-correlation matrix
        c = self.bn(z1).T @ self.bn(z2)

        # sum the cross-correlation matrix between all gpus
        c.div_(self.args.batch_size)
        # (world size 1: torch.distributed.all_reduce(c) is the identity)

        on_diag = torch.diagonal(c).add_(-1).pow_(2).sum()
        off_diag = off_diagonal(c).pow_(2).sum()
        loss = on_diag + self.args.lambd * off_diag
        return loss


class LARS(optim.Optimizer):
    def __init__(self, params, lr, weight_decay=0, momentum=0.9, eta=0.001,
                 weight_decay_filter=False, lars_adaptation_filter=False):
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                        eta=eta, weight_decay_filter=weight_decay_filter,
                        lars_adaptation_filter=lars_adaptation_filter)
        super().__init__(params, defaults)

    def exclude_bias_and_norm(self, p):
        return p.ndim == 1

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g['params']:
                dp = p.grad

                if dp is None:
                    continue

                if not g['weight_decay_filter'] or not self.exclude_bias_and_norm(p):
                    dp = dp.add(p, alpha=g['weight_decay'])

                if not g['lars_adaptation_filter'] or not self.exclude_bias_and_norm(p):
                    param_norm = torch.norm(p)
                    update_norm = torch.norm(dp)
                    one = torch.ones_like(param_norm)
                    q = torch.where(param_norm > 0.,
                                    torch.where(update_norm > 0,
                                                (g['eta'] * param_norm / update_norm), one), one)
                    dp = dp.mul(q)

                param_state = self.state[p]
                if 'mu' not in param_state:
                    param_state['mu'] = torch.zeros_like(p)
                mu = param_state['mu']
                mu.mul_(g['momentum']).add_(dp)

                p.add_(mu, alpha=-g['lr'])


class Args:
    epochs, batch_size, learning_rate_weights, learning_rate_biases = 6, 64, 5.0, 0.12
    weight_decay, lambd, projector, print_freq = 1e-6, 0.0051, '128-128-128', 8


def main():
    args = Args()
    random.seed(0)
    torch.manual_seed(0)
    model = BarlowTwins(args)
    param_weights = []
    param_biases = []
    for param in model.parameters():
        if param.ndim == 1:
            param_biases.append(param)
        else:
            param_weights.append(param)
    parameters = [{'params': param_weights}, {'params': param_biases}]
    optimizer = LARS(parameters, lr=0, weight_decay=args.weight_decay,
                     weight_decay_filter=True,
                     lars_adaptation_filter=True)
    start_epoch = 0

    dataset = SyntheticImages(512, transform=TwoCropsTransform(RandomAugment()))
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, num_workers=0, shuffle=True, drop_last=True)

    scaler = torch.amp.GradScaler("cpu")
    losses = []
    for epoch in range(start_epoch, args.epochs):
        for step, ((y1, y2), _) in enumerate(loader, start=epoch * len(loader)):
            adjust_learning_rate(args, optimizer, loader, step)
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model.forward(y1, y2)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            losses.append(loss.item())
            if step % args.print_freq == 0:
                stats = dict(epoch=epoch, step=step,
                             lr_weights=optimizer.param_groups[0]['lr'],
                             lr_biases=optimizer.param_groups[1]['lr'],
                             loss=loss.item())
                print(stats)
    first, last = sum(losses[:8]) / 8, sum(losses[-8:]) / 8
    print(f"[summary] loss(mean of 8 steps) first={first:.3f} last={last:.3f} decreased={last < first}")


if __name__ == '__main__':
    main()
