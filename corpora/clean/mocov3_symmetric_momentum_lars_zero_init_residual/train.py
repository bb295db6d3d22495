# Source: facebookresearch/moco-v3, main_moco.py, moco/builder.py, moco/optimizer.py, commit c349e6e24f40d3fedb22d973f92defa4cedf37a7
# https://github.com/facebookresearch/moco-v3
#
# MoCo v3 (ResNet variant): symmetrised InfoNCE between a predictor on the base encoder and a momentum
# encoder (params copied then requires_grad=False, updated under no_grad INSIDE forward before the keys are
# computed, momentum raised by a cosine schedule), keys gathered with torch.distributed.all_gather (no grad),
# labels offset by N*rank, loss scaled by 2T; LARS over model.parameters() (momentum encoder included,
# skipped since its grads are None; no LARS scaling / weight decay for 1-D params), per-iteration warmup +
# cosine LR set by hand, autocast + GradScaler, ResNet with zero_init_residual=True, BN without affine at
# the projector end.
# Adaptation: torchvision is not installed, so a small torchvision-style ResNet (BasicBlock, 3 stages, width
# 16, zero_init_residual) is written here; ImageNet + torchvision augmentations -> synthetic 10-class 3x32x32
# images with two tensor-augmented views; the process group is a single-process gloo group so
# concat_all_gather runs its real code; CUDA autocast/GradScaler -> CPU bfloat16 autocast with
# torch.amp.GradScaler('cpu'); .cuda() on labels dropped; epochs 100 -> 5 (warmup 10 -> 1), lr 0.6 -> 0.6
# scaled by batch/256 as in the script, moco_mlp_dim 4096 -> 256, dim 256 -> 64; a k-NN probe added.
import builtins
import math
import os
import time
from functools import partial

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------- moco/builder.py
class MoCo(nn.Module):
    """
    Build a MoCo model with a base encoder, a momentum encoder, and two MLPs
    https://arxiv.org/abs/1911.05722
    """
    def __init__(self, base_encoder, dim=256, mlp_dim=4096, T=1.0):
        """
        dim: feature dimension (default: 256)
        mlp_dim: hidden dimension in MLPs (default: 4096)
        T: softmax temperature (default: 1.0)
        """
        super(MoCo, self).__init__()

        self.T = T

        # build encoders
        self.base_encoder = base_encoder(num_classes=mlp_dim)
        self.momentum_encoder = base_encoder(num_classes=mlp_dim)

        self._build_projector_and_predictor_mlps(dim, mlp_dim)

        for param_b, param_m in zip(self.base_encoder.parameters(), self.momentum_encoder.parameters()):
            param_m.data.copy_(param_b.data)  # initialize
            param_m.requires_grad = False  # not update by gradient

    def _build_mlp(self, num_layers, input_dim, mlp_dim, output_dim, last_bn=True):
        mlp = []
        for l in range(num_layers):
            dim1 = input_dim if l == 0 else mlp_dim
            dim2 = output_dim if l == num_layers - 1 else mlp_dim

            mlp.append(nn.Linear(dim1, dim2, bias=False))

            if l < num_layers - 1:
                mlp.append(nn.BatchNorm1d(dim2))
                mlp.append(nn.ReLU(inplace=True))
            elif last_bn:
                # follow SimCLR's design: https://github.com/google-research/simclr/blob/master/model_util.py#L157
                # for simplicity, we further removed gamma in BN
                mlp.append(nn.BatchNorm1d(dim2, affine=False))

        return nn.Sequential(*mlp)

    def _build_projector_and_predictor_mlps(self, dim, mlp_dim):
        pass

    @torch.no_grad()
    def _update_momentum_encoder(self, m):
        """Momentum update of the momentum encoder"""
        for param_b, param_m in zip(self.base_encoder.parameters(), self.momentum_encoder.parameters()):
            param_m.data = param_m.data * m + param_b.data * (1. - m)

    def contrastive_loss(self, q, k):
        # normalize
        q = nn.functional.normalize(q, dim=1)
        k = nn.functional.normalize(k, dim=1)
        # gather all targets
        k = concat_all_gather(k)
        # Einstein sum is more intuitive
        logits = torch.einsum('nc,mc->nm', [q, k]) / self.T
        N = logits.shape[0]  # batch size per GPU
        labels = (torch.arange(N, dtype=torch.long) + N * torch.distributed.get_rank())
        return nn.CrossEntropyLoss()(logits, labels) * (2 * self.T)

    def forward(self, x1, x2, m):
        """
        Input:
            x1: first views of images
            x2: second views of images
            m: moco momentum
        Output:
            loss
        """

        # compute features
        q1 = self.predictor(self.base_encoder(x1))
        q2 = self.predictor(self.base_encoder(x2))

        with torch.no_grad():  # no gradient
            self._update_momentum_encoder(m)  # update the momentum encoder

            # compute momentum features as targets
            k1 = self.momentum_encoder(x1)
            k2 = self.momentum_encoder(x2)

        return self.contrastive_loss(q1, k2) + self.contrastive_loss(q2, k1)


class MoCo_ResNet(MoCo):
    def _build_projector_and_predictor_mlps(self, dim, mlp_dim):
        hidden_dim = self.base_encoder.fc.weight.shape[1]
        del self.base_encoder.fc, self.momentum_encoder.fc # remove original fc layer

        # projectors
        self.base_encoder.fc = self._build_mlp(2, hidden_dim, mlp_dim, dim)
        self.momentum_encoder.fc = self._build_mlp(2, hidden_dim, mlp_dim, dim)

        # predictor
        self.predictor = self._build_mlp(2, dim, mlp_dim, dim, False)


# utils
@torch.no_grad()
def concat_all_gather(tensor):
    """
    Performs all_gather operation on the provided tensors.
    *** Warning ***: torch.distributed.all_gather has no gradient.
    """
    tensors_gather = [torch.ones_like(tensor)
        for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(tensors_gather, tensor, async_op=False)

    output = torch.cat(tensors_gather, dim=0)
    return output

# ---------------------------------------------------------------- moco/optimizer.py
class LARS(torch.optim.Optimizer):
    """
    LARS optimizer, no rate scaling or weight decay for parameters <= 1D.
    """
    def __init__(self, params, lr=0, weight_decay=0, momentum=0.9, trust_coefficient=0.001):
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, trust_coefficient=trust_coefficient)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g['params']:
                dp = p.grad

                if dp is None:
                    continue

                if p.ndim > 1: # if not normalization gamma/beta or bias
                    dp = dp.add(p, alpha=g['weight_decay'])
                    param_norm = torch.norm(p)
                    update_norm = torch.norm(dp)
                    one = torch.ones_like(param_norm)
                    q = torch.where(param_norm > 0.,
                                    torch.where(update_norm > 0,
                                    (g['trust_coefficient'] * param_norm / update_norm), one),
                                    one)
                    dp = dp.mul(q)

                param_state = self.state[p]
                if 'mu' not in param_state:
                    param_state['mu'] = torch.zeros_like(p)
                mu = param_state['mu']
                mu.mul_(g['momentum']).add_(dp)
                p.add_(mu, alpha=-g['lr'])


# ---------------------------------------------------------------- torchvision.models.resnet (reduced)
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
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
    def __init__(self, layers=(1, 1, 1), width=16, num_classes=1000, zero_init_residual=False):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
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
        # Zero-initialize the last BN in each residual branch
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

    def forward_features(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return torch.flatten(self.avgpool(x), 1)

    def forward(self, x):
        return self.fc(self.forward_features(x))


def resnet_small(num_classes=1000, zero_init_residual=False):
    return ResNet(num_classes=num_classes, zero_init_residual=zero_init_residual)


# ---------------------------------------------------------------- synthetic data + two-crop augmentation
def make_images(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 40), torch.linspace(-1, 1, 40), indexing='ij')
    ang = (y.float() * math.pi / 10)[:, None, None]
    freq = (2 + (y % 4)).float()[:, None, None]
    base = torch.sin(freq * math.pi * (xx * torch.cos(ang) + yy * torch.sin(ang)))
    colour = torch.stack([torch.cos(y.float()), torch.sin(y.float()), torch.cos(2 * y.float())], 1)[:, :, None, None]
    img = 0.6 * base[:, None] * (0.7 + 0.3 * colour) + 0.5 * torch.randn(n, 3, 40, 40, generator=g)
    return img, y


class TwoCropsTransform:
    """Take two random crops of one image"""
    def __init__(self, base_transform1, base_transform2):
        self.base_transform1 = base_transform1
        self.base_transform2 = base_transform2

    def __call__(self, x):
        im1 = self.base_transform1(x)
        im2 = self.base_transform2(x)
        return [im1, im2]


def augment(x):
    i, j = torch.randint(0, 9, (2,)).tolist()
    x = x[:, i:i + 32, j:j + 32]
    if torch.rand(()) < 0.5:
        x = x.flip(-1)
    scale = 1 + 0.4 * (torch.rand(3, 1, 1) - 0.5)
    return x * scale + 0.2 * (torch.rand(3, 1, 1) - 0.5)


class Dataset(torch.utils.data.Dataset):
    def __init__(self, images, labels, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.transform(self.images[i]), self.labels[i]


# ---------------------------------------------------------------- main_moco.py
class AverageMeter(object):
    def __init__(self, name, fmt=':f'):
        self.name, self.fmt = name, fmt
        self.reset()

    def reset(self):
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def adjust_learning_rate(optimizer, epoch, args):
    """Decays the learning rate with half-cycle cosine after warmup"""
    if epoch < args.warmup_epochs:
        lr = args.lr * epoch / args.warmup_epochs
    else:
        lr = args.lr * 0.5 * (1. + math.cos(math.pi * (epoch - args.warmup_epochs) / (args.epochs - args.warmup_epochs)))
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr
    return lr


def adjust_moco_momentum(epoch, args):
    """Adjust moco momentum based on current epoch"""
    m = 1. - 0.5 * (1. + math.cos(math.pi * epoch / args.epochs)) * (1. - args.moco_m)
    return m


def train(train_loader, model, optimizer, scaler, epoch, args):
    losses = AverageMeter('Loss', ':.4e')

    # switch to train mode
    model.train()

    iters_per_epoch = len(train_loader)
    moco_m = args.moco_m
    for i, (images, _) in enumerate(train_loader):
        # adjust learning rate and momentum coefficient per iteration
        lr = adjust_learning_rate(optimizer, epoch + i / iters_per_epoch, args)
        if args.moco_m_cos:
            moco_m = adjust_moco_momentum(epoch + i / iters_per_epoch, args)

        # compute output
        with torch.autocast('cpu', dtype=torch.bfloat16):
            loss = model(images[0], images[1], moco_m)

        losses.update(loss.item(), images[0].size(0))

        # compute gradient and do SGD step
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

        if i % args.print_freq == 0:
            print("Epoch: [{}][{}/{}] LR {:.4e} Loss {:.4e} m {:.4f}".format(epoch, i, iters_per_epoch, lr, loss.item(), moco_m))
    return losses.avg


@torch.no_grad()
def knn_accuracy(encoder, train_x, train_y, test_x, test_y, k=10):
    encoder.eval()
    ftr = F.normalize(encoder.forward_features(train_x[:, :, 4:36, 4:36]), dim=1)
    fte = F.normalize(encoder.forward_features(test_x[:, :, 4:36, 4:36]), dim=1)
    idx = (fte @ ftr.t()).topk(k, dim=1).indices
    pred = torch.mode(train_y[idx], dim=1).values
    encoder.train()
    return (pred == test_y).float().mean().item() * 100


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    args = type('Args', (), dict(lr=0.6, batch_size=64, wd=1e-6, moco_m=0.99, moco_m_cos=True, moco_t=1.0,
                                 moco_dim=64, moco_mlp_dim=256, epochs=5, warmup_epochs=1, print_freq=4,
                                 optimizer='lars', rank=0, world_size=1, arch='resnet_small'))()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group(backend="gloo", world_size=args.world_size, rank=args.rank)
    torch.distributed.barrier()

    print("=> creating model '{}'".format(args.arch))
    model = MoCo_ResNet(
        partial(resnet_small, zero_init_residual=True),
        args.moco_dim, args.moco_mlp_dim, args.moco_t)

    args.lr = args.lr * args.batch_size / 256

    if args.optimizer == 'lars':
        optimizer = LARS(model.parameters(), args.lr,
                         weight_decay=args.wd,
                         momentum=0.9)
    elif args.optimizer == 'adamw':
        optimizer = torch.optim.AdamW(model.parameters(), args.lr,
                                      weight_decay=args.wd)

    scaler = torch.amp.GradScaler('cpu')

    images, labels = make_images(640, 1)
    test_images, test_labels = make_images(256, 2)
    train_dataset = Dataset(images, labels, TwoCropsTransform(augment, augment))
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=True,
        num_workers=0, pin_memory=False, drop_last=True)

    knn_before = knn_accuracy(model.base_encoder, images, labels, test_images, test_labels)
    print("k-NN accuracy before training: %.2f" % knn_before)
    epoch_losses = []
    for epoch in range(0, args.epochs):
        epoch_losses.append(train(train_loader, model, optimizer, scaler, epoch, args))
        print("epoch %d mean loss %.4f" % (epoch, epoch_losses[-1]))
    knn_after = knn_accuracy(model.base_encoder, images, labels, test_images, test_labels)
    print("k-NN accuracy after training: %.2f" % knn_after)
    print("[summary] loss(epoch mean) first=%.4f last=%.4f decreased=%s; knn_acc before=%.2f after=%.2f"
          % (epoch_losses[0], epoch_losses[-1], epoch_losses[-1] < epoch_losses[0], knn_before, knn_after))
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
