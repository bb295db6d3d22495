# Source: facebookresearch/simsiam, main_simsiam.py + simsiam/builder.py + simsiam/loader.py,
# commit a7bc1772896d0dad0806c51f0bb6f3b16d290468
# https://github.com/facebookresearch/simsiam
#
# SimSiam: stop-gradient on the targets (z.detach()), negative cosine loss (goes from ~0 toward -1),
# projector fc bias with requires_grad=False but still passed to SGD ("hack: not use bias as it is followed by
# BN"), affine-free BatchNorm1d output layer, zero_init_residual, predictor group with a fixed LR
# (--fix-pred-lr) while the encoder group follows a cosine schedule.
# Adaptation: DDP/SyncBN/ImageFolder/torchvision are unavailable on CPU: a single process runs the same
# model (the repo raises NotImplementedError without DDP, which is bypassed), torchvision's ResNet-50 becomes a
# 3-stage BasicBlock ResNet (width 16) with the same constructor arguments, ImageNet becomes 512 synthetic
# 16x16 images, the augmentations become tensor ops; dim 2048 -> 128, pred_dim 512 -> 32, batch 512 -> 64,
# 100 epochs -> 5, lr 0.05 -> 0.8 (init_lr = lr * 64 / 256 = 0.2).
import math
import random

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


class SimSiam(nn.Module):
    """
    Build a SimSiam model.
    """
    def __init__(self, base_encoder, dim=2048, pred_dim=512):
        """
        dim: feature dimension (default: 2048)
        pred_dim: hidden dimension of the predictor (default: 512)
        """
        super(SimSiam, self).__init__()

        # create the encoder
        # num_classes is the output fc dimension, zero-initialize last BNs
        self.encoder = base_encoder(num_classes=dim, zero_init_residual=True)

        # build a 3-layer projector
        prev_dim = self.encoder.fc.weight.shape[1]
        self.encoder.fc = nn.Sequential(nn.Linear(prev_dim, prev_dim, bias=False),
                                        nn.BatchNorm1d(prev_dim),
                                        nn.ReLU(inplace=True), # first layer
                                        nn.Linear(prev_dim, prev_dim, bias=False),
                                        nn.BatchNorm1d(prev_dim),
                                        nn.ReLU(inplace=True), # second layer
                                        self.encoder.fc,
                                        nn.BatchNorm1d(dim, affine=False)) # output layer
        self.encoder.fc[6].bias.requires_grad = False # hack: not use bias as it is followed by BN

        # build a 2-layer predictor
        self.predictor = nn.Sequential(nn.Linear(dim, pred_dim, bias=False),
                                        nn.BatchNorm1d(pred_dim),
                                        nn.ReLU(inplace=True), # hidden layer
                                        nn.Linear(pred_dim, dim)) # output layer

    def forward(self, x1, x2):
        # compute features for one view
        z1 = self.encoder(x1) # NxC
        z2 = self.encoder(x2) # NxC

        p1 = self.predictor(z1) # NxC
        p2 = self.predictor(z2) # NxC

        return p1, p2, z1.detach(), z2.detach()


class AverageMeter(object):
    """Computes and stores the average and current value"""
    def __init__(self, name, fmt=':f'):
        self.name = name
        self.fmt = fmt
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


def adjust_learning_rate(optimizer, init_lr, epoch, args):
    """Decay the learning rate based on schedule"""
    cur_lr = init_lr * 0.5 * (1. + math.cos(math.pi * epoch / args.epochs))
    for param_group in optimizer.param_groups:
        if 'fix_lr' in param_group and param_group['fix_lr']:
            param_group['lr'] = init_lr
        else:
            param_group['lr'] = cur_lr


def train(train_loader, model, criterion, optimizer, epoch, args):
    losses = AverageMeter('Loss', ':.4f')

    # switch to train mode
    model.train()

    for i, (images, _) in enumerate(train_loader):
        # compute output and loss
        p1, p2, z1, z2 = model(x1=images[0], x2=images[1])
        loss = -(criterion(p1, z2).mean() + criterion(p2, z1).mean()) * 0.5

        losses.update(loss.item(), images[0].size(0))

        # compute gradient and do SGD step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return losses.avg


class Args:
    epochs, batch_size, lr, momentum, weight_decay = 5, 64, 0.8, 0.9, 1e-4
    dim, pred_dim, fix_pred_lr, start_epoch = 128, 32, True, 0


def main():
    args = Args()
    random.seed(0)
    torch.manual_seed(0)
    model = SimSiam(resnet18, args.dim, args.pred_dim)

    # infer learning rate before changing batch size
    init_lr = args.lr * args.batch_size / 256

    criterion = nn.CosineSimilarity(dim=1)

    if args.fix_pred_lr:
        optim_params = [{'params': model.encoder.parameters(), 'fix_lr': False},
                        {'params': model.predictor.parameters(), 'fix_lr': True}]
    else:
        optim_params = model.parameters()

    optimizer = torch.optim.SGD(optim_params, init_lr,
                                momentum=args.momentum,
                                weight_decay=args.weight_decay)

    train_dataset = SyntheticImages(512, transform=TwoCropsTransform(RandomAugment()))
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=True,
        num_workers=0, pin_memory=False, sampler=None, drop_last=True)

    for epoch in range(args.start_epoch, args.epochs):
        adjust_learning_rate(optimizer, init_lr, epoch, args)
        loss = train(train_loader, model, criterion, optimizer, epoch, args)
        print(f"Epoch: [{epoch}] Loss {loss:.4f}")
        if epoch == 0:
            first = loss
    print(f"[summary] loss first={first:.4f} last={loss:.4f} decreased={loss < first}")


if __name__ == '__main__':
    main()
