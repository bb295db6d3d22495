# Source: facebookresearch/swav, main_swav.py + src/resnet50.py, commit 06b1b7cbaf6ba2a792300d79c7299db98b93b7f9
# https://github.com/facebookresearch/swav/blob/main/main_swav.py
#
# SwAV: prototypes re-normalised in place under no_grad before every step, codes from Sinkhorn-Knopp computed
# under no_grad on detached scores (exp(out / 0.05), several in-place divisions), a feature queue that starts
# empty (all zeros) at a later epoch and is only used once its last row is non-zero, swapped prediction over
# multi-crop views of two resolutions concatenated per resolution (unique_consecutive on the widths),
# `p.grad = None` for the prototypes during the first freeze_prototypes_niters iterations, per-iteration LR from a
# numpy schedule written into param_groups.
# Adaptation: one CPU process: dist.all_reduce in the Sinkhorn is the identity (world size 1), model.module ->
# model, .cuda() dropped; apex LARC / fp16 not used (plain SGD, use_fp16 False); ResNet-50 -> 3-stage
# BasicBlock ResNet (width 16); ImageNet multi-crop -> 512 synthetic images, 2 crops of 16x16 + 2 of 8x8;
# nmb_prototypes 3000 -> 30, feat_dim 128 -> 32, hidden_mlp 2048 -> 64, batch 64, queue_length 128 starting at
# epoch 2, freeze_prototypes_niters 313 -> 10, epochs 100 -> 5 (warmup 1), base_lr 4.8 -> 0.6; no logging/checkpoints.
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


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


class SwAVResNet(nn.Module):
    """src/resnet50.py ResNet's projection head / l2norm / prototypes around a small backbone."""

    def __init__(self, normalize=True, output_dim=32, hidden_mlp=64, nmb_prototypes=30):
        super().__init__()
        self.backbone = resnet18()
        num_out_filters = self.backbone.fc.in_features
        self.backbone.fc = nn.Identity()
        # normalize output features
        self.l2norm = normalize

        # projection head
        if output_dim == 0:
            self.projection_head = None
        elif hidden_mlp == 0:
            self.projection_head = nn.Linear(num_out_filters, output_dim)
        else:
            self.projection_head = nn.Sequential(
                nn.Linear(num_out_filters, hidden_mlp),
                nn.BatchNorm1d(hidden_mlp),
                nn.ReLU(inplace=True),
                nn.Linear(hidden_mlp, output_dim),
            )

        # prototype layer
        self.prototypes = None
        if nmb_prototypes > 0:
            self.prototypes = nn.Linear(output_dim, nmb_prototypes, bias=False)

    def forward_backbone(self, x):
        return self.backbone(x)

    def forward_head(self, x):
        if self.projection_head is not None:
            x = self.projection_head(x)

        if self.l2norm:
            x = nn.functional.normalize(x, dim=1, p=2)

        if self.prototypes is not None:
            return x, self.prototypes(x)
        return x

    def forward(self, inputs):
        if not isinstance(inputs, list):
            inputs = [inputs]
        idx_crops = torch.cumsum(torch.unique_consecutive(
            torch.tensor([inp.shape[-1] for inp in inputs]),
            return_counts=True,
        )[1], 0)
        start_idx = 0
        for end_idx in idx_crops:
            _out = self.forward_backbone(torch.cat(inputs[start_idx: end_idx]))
            if start_idx == 0:
                output = _out
            else:
                output = torch.cat((output, _out))
            start_idx = end_idx
        return self.forward_head(output)


class MultiCropDataset(torch.utils.data.Dataset):
    """Stand-in for src/multicropdataset.py: nmb_crops[i] random crops of size_crops[i] per image (tensor ops)."""

    def __init__(self, n=512, size_crops=(16, 8), nmb_crops=(2, 2), seed=0):
        g = torch.Generator().manual_seed(seed)
        protos = F.avg_pool2d(torch.rand(10, 3, 24, 24, generator=g), 3, 1, 1)
        noise = F.avg_pool2d(torch.randn(n, 3, 24, 24, generator=g), 5, 1, 2)
        self.data = (0.5 * protos[torch.randint(0, 10, (n,), generator=g)] + 0.25 + 0.6 * noise).clamp(0, 1)
        self.size_crops, self.nmb_crops = size_crops, nmb_crops

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        crops = []
        for size, k in zip(self.size_crops, self.nmb_crops):
            for _ in range(k):
                s = random.randint(size, 24)
                a, b = random.randint(0, 24 - s), random.randint(0, 24 - s)
                c = F.interpolate(self.data[i:i + 1, :, a:a + s, b:b + s], size=(size, size), mode="bilinear", align_corners=False)[0]
                if random.random() < 0.5:
                    c = c.flip(-1)
                crops.append((c - 0.5) / 0.25)
        return crops


class AverageMeter(object):
    """computes and stores the average and current value"""

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


class args:
    nmb_crops, size_crops, crops_for_assign, temperature, epsilon, sinkhorn_iterations = [2, 2], [16, 8], [0, 1], 0.1, 0.05, 3
    feat_dim, nmb_prototypes, queue_length, epoch_queue_starts, epochs, batch_size = 32, 30, 128, 2, 5, 64
    base_lr, final_lr, freeze_prototypes_niters, wd, warmup_epochs, start_warmup = 0.6, 0.0006, 10, 1e-6, 1, 0
    hidden_mlp, world_size, rank, use_fp16 = 64, 1, 0, False


def train(train_loader, model, optimizer, epoch, lr_schedule, queue):
    losses = AverageMeter()

    model.train()
    use_the_queue = False

    for it, inputs in enumerate(train_loader):
        # update learning rate
        iteration = epoch * len(train_loader) + it
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr_schedule[iteration]

        # normalize the prototypes
        with torch.no_grad():
            w = model.prototypes.weight.data.clone()
            w = nn.functional.normalize(w, dim=1, p=2)
            model.prototypes.weight.copy_(w)

        # ============ multi-res forward passes ... ============
        embedding, output = model(inputs)
        embedding = embedding.detach()
        bs = inputs[0].size(0)

        # ============ swav loss ... ============
        loss = 0
        for i, crop_id in enumerate(args.crops_for_assign):
            with torch.no_grad():
                out = output[bs * crop_id: bs * (crop_id + 1)].detach()

                # time to use the queue
                if queue is not None:
                    if use_the_queue or not torch.all(queue[i, -1, :] == 0):
                        use_the_queue = True
                        out = torch.cat((torch.mm(
                            queue[i],
                            model.prototypes.weight.t()
                        ), out))
                    # fill the queue
                    queue[i, bs:] = queue[i, :-bs].clone()
                    queue[i, :bs] = embedding[crop_id * bs: (crop_id + 1) * bs]

                # get assignments
                q = distributed_sinkhorn(out)[-bs:]

            # cluster assignment prediction
            subloss = 0
            for v in np.delete(np.arange(np.sum(args.nmb_crops)), crop_id):
                x = output[bs * v: bs * (v + 1)] / args.temperature
                subloss -= torch.mean(torch.sum(q * F.log_softmax(x, dim=1), dim=1))
            loss += subloss / (np.sum(args.nmb_crops) - 1)
        loss /= len(args.crops_for_assign)

        # ============ backward and optim step ... ============
        optimizer.zero_grad()
        loss.backward()
        # cancel gradients for the prototypes
        if iteration < args.freeze_prototypes_niters:
            for name, p in model.named_parameters():
                if "prototypes" in name:
                    p.grad = None
        optimizer.step()

        # ============ misc ... ============
        losses.update(loss.item(), inputs[0].size(0))
    print(f"Epoch: [{epoch}] Loss {losses.avg:.4f} Lr: {optimizer.param_groups[0]['lr']:.4f} queue {'on' if use_the_queue else 'off'}")
    return (epoch, losses.avg), queue


@torch.no_grad()
def distributed_sinkhorn(out):
    Q = torch.exp(out / args.epsilon).t() # Q is K-by-B for consistency with notations from our paper
    B = Q.shape[1] * args.world_size # number of samples to assign
    K = Q.shape[0] # how many prototypes

    # make the matrix sums to 1
    sum_Q = torch.sum(Q)
    Q /= sum_Q

    for it in range(args.sinkhorn_iterations):
        # normalize each row: total weight per prototype must be 1/K
        sum_of_rows = torch.sum(Q, dim=1, keepdim=True)
        Q /= sum_of_rows
        Q /= K

        # normalize each column: total weight per sample must be 1/B
        Q /= torch.sum(Q, dim=0, keepdim=True)
        Q /= B

    Q *= B # the colomns must sum to 1 so that Q is an assignment
    return Q.t()


def main():
    random.seed(31)
    np.random.seed(31)
    torch.manual_seed(31)
    train_dataset = MultiCropDataset(512, args.size_crops, args.nmb_crops)
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=True, num_workers=0, drop_last=True)

    model = SwAVResNet(normalize=True, hidden_mlp=args.hidden_mlp, output_dim=args.feat_dim,
                       nmb_prototypes=args.nmb_prototypes)

    # build optimizer
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=args.base_lr,
        momentum=0.9,
        weight_decay=args.wd,
    )
    warmup_lr_schedule = np.linspace(args.start_warmup, args.base_lr, len(train_loader) * args.warmup_epochs)
    iters = np.arange(len(train_loader) * (args.epochs - args.warmup_epochs))
    cosine_lr_schedule = np.array([args.final_lr + 0.5 * (args.base_lr - args.final_lr) * (1 + \
                         math.cos(math.pi * t / (len(train_loader) * (args.epochs - args.warmup_epochs)))) for t in iters])
    lr_schedule = np.concatenate((warmup_lr_schedule, cosine_lr_schedule))

    queue = None
    # the queue needs to be divisible by the batch size
    args.queue_length -= args.queue_length % (args.batch_size * args.world_size)

    scores_all = []
    for epoch in range(0, args.epochs):
        # optionally starts a queue
        if args.queue_length > 0 and epoch >= args.epoch_queue_starts and queue is None:
            queue = torch.zeros(
                len(args.crops_for_assign),
                args.queue_length // args.world_size,
                args.feat_dim,
            )

        # train the network
        scores, queue = train(train_loader, model, optimizer, epoch, lr_schedule, queue)
        scores_all.append(scores[1])
    print(f"[summary] swav_loss first={scores_all[0]:.4f} last={scores_all[-1]:.4f} decreased={scores_all[-1] < scores_all[0]}")


if __name__ == "__main__":
    main()
