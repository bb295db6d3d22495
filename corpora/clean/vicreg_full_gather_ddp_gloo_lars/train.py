# Source: facebookresearch/vicreg, main_vicreg.py + resnet.py + distributed.py, commit 4e12602fd495af83efd1631fbe82523e6db092e0
# https://github.com/facebookresearch/vicreg/blob/main/main_vicreg.py
#
# VICReg: invariance (MSE) + variance (hinge on the std, sqrt(var + 1e-4)) + covariance (squared off-diagonal,
# in-place pow_) terms; embeddings gathered with a custom autograd.Function (FullGatherLayer: all_gather forward,
# all_reduce of the stacked grads backward, returns only this rank's slice); DistributedDataParallel; LARS
# (biases/norm params excluded from decay and adaptation) constructed with lr=0 and driven by a hand-written
# warmup/cosine schedule (first step at lr 0); mixed precision with a GradScaler; zero_init_residual backbone
# whose fc is replaced so that it returns the 2048-d (here 64-d) embedding.
# Adaptation: a real single-process gloo process group on 127.0.0.1 (world size 1) instead of SLURM/NCCL, so
# all_gather / all_reduce / DDP run for real; SyncBatchNorm conversion dropped (CPU); torch.cuda.amp ->
# torch.autocast("cpu", bfloat16) + torch.amp.GradScaler("cpu"); ImageNet + PIL augmentations -> 512 synthetic
# 16x16 images with two tensor-augmented views; resnet50 -> 3-stage BasicBlock ResNet (width 16, 64-d
# embedding); mlp 8192-8192-8192 -> 128-128-128; batch 2048 -> 64; epochs 100 -> 6 with 1 warmup epoch (10 in the
# repo); base_lr 0.2 -> 5.0 (for 48 LARS steps); no checkpoints, SIGUSR1 handlers or stats file.
import math
import random
import socket

import torch
import torch.distributed as dist
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
        noise = F.avg_pool2d(torch.randn(n, 3, size + 4, size + 4, generator=g), 5, 1, 0)  # smooth per-image detail
        self.data = (0.5 * protos[self.targets] + 0.25 + 0.6 * noise).clamp(0, 1)
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


def resnet_small(zero_init_residual=False):
    """resnet.py's constructors return (model, embedding_dim) with the classifier removed."""
    model = resnet18(zero_init_residual=zero_init_residual)
    model.fc = nn.Identity()
    return model, 64


def adjust_learning_rate(args, optimizer, loader, step):
    max_steps = args.epochs * len(loader)
    warmup_steps = 1 * len(loader)
    base_lr = args.base_lr * args.batch_size / 256
    if step < warmup_steps:
        lr = base_lr * step / warmup_steps
    else:
        step -= warmup_steps
        max_steps -= warmup_steps
        q = 0.5 * (1 + math.cos(math.pi * step / max_steps))
        end_lr = base_lr * 0.001
        lr = base_lr * q + end_lr * (1 - q)
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    return lr


class VICReg(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.num_features = int(args.mlp.split("-")[-1])
        self.backbone, self.embedding = resnet_small(
            zero_init_residual=True
        )
        self.projector = Projector(args, self.embedding)

    def forward(self, x, y):
        x = self.projector(self.backbone(x))
        y = self.projector(self.backbone(y))

        repr_loss = F.mse_loss(x, y)

        x = torch.cat(FullGatherLayer.apply(x), dim=0)
        y = torch.cat(FullGatherLayer.apply(y), dim=0)
        x = x - x.mean(dim=0)
        y = y - y.mean(dim=0)

        std_x = torch.sqrt(x.var(dim=0) + 0.0001)
        std_y = torch.sqrt(y.var(dim=0) + 0.0001)
        std_loss = torch.mean(F.relu(1 - std_x)) / 2 + torch.mean(F.relu(1 - std_y)) / 2

        cov_x = (x.T @ x) / (self.args.batch_size - 1)
        cov_y = (y.T @ y) / (self.args.batch_size - 1)
        cov_loss = off_diagonal(cov_x).pow_(2).sum().div(
            self.num_features
        ) + off_diagonal(cov_y).pow_(2).sum().div(self.num_features)

        loss = (
            self.args.sim_coeff * repr_loss
            + self.args.std_coeff * std_loss
            + self.args.cov_coeff * cov_loss
        )
        return loss


def Projector(args, embedding):
    mlp_spec = f"{embedding}-{args.mlp}"
    layers = []
    f = list(map(int, mlp_spec.split("-")))
    for i in range(len(f) - 2):
        layers.append(nn.Linear(f[i], f[i + 1]))
        layers.append(nn.BatchNorm1d(f[i + 1]))
        layers.append(nn.ReLU(True))
    layers.append(nn.Linear(f[-2], f[-1], bias=False))
    return nn.Sequential(*layers)


def exclude_bias_and_norm(p):
    return p.ndim == 1


def off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


class LARS(optim.Optimizer):
    def __init__(
        self,
        params,
        lr,
        weight_decay=0,
        momentum=0.9,
        eta=0.001,
        weight_decay_filter=None,
        lars_adaptation_filter=None,
    ):
        defaults = dict(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            eta=eta,
            weight_decay_filter=weight_decay_filter,
            lars_adaptation_filter=lars_adaptation_filter,
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                dp = p.grad

                if dp is None:
                    continue

                if g["weight_decay_filter"] is None or not g["weight_decay_filter"](p):
                    dp = dp.add(p, alpha=g["weight_decay"])

                if g["lars_adaptation_filter"] is None or not g[
                    "lars_adaptation_filter"
                ](p):
                    param_norm = torch.norm(p)
                    update_norm = torch.norm(dp)
                    one = torch.ones_like(param_norm)
                    q = torch.where(
                        param_norm > 0.0,
                        torch.where(
                            update_norm > 0, (g["eta"] * param_norm / update_norm), one
                        ),
                        one,
                    )
                    dp = dp.mul(q)

                param_state = self.state[p]
                if "mu" not in param_state:
                    param_state["mu"] = torch.zeros_like(p)
                mu = param_state["mu"]
                mu.mul_(g["momentum"]).add_(dp)

                p.add_(mu, alpha=-g["lr"])


class FullGatherLayer(torch.autograd.Function):
    """
    Gather tensors from all process and support backward propagation
    for the gradients across processes.
    """

    @staticmethod
    def forward(ctx, x):
        output = [torch.zeros_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(output, x)
        return tuple(output)

    @staticmethod
    def backward(ctx, *grads):
        all_gradients = torch.stack(grads)
        dist.all_reduce(all_gradients)
        return all_gradients[dist.get_rank()]


class Args:
    mlp, epochs, batch_size, base_lr, wd = "128-128-128", 6, 64, 5.0, 1e-6
    sim_coeff, std_coeff, cov_coeff, world_size, rank = 25.0, 25.0, 1.0, 1, 0


def init_distributed_mode(args):
    with socket.socket() as s:  # a free loopback port for the single-process group
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group(backend="gloo", init_method=f"tcp://127.0.0.1:{port}",
                            world_size=args.world_size, rank=args.rank)


def main():
    args = Args()
    random.seed(0)
    torch.manual_seed(0)
    init_distributed_mode(args)
    try:
        dataset = SyntheticImages(512, transform=TwoCropsTransform(RandomAugment()))
        sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=True)
        assert args.batch_size % args.world_size == 0
        per_device_batch_size = args.batch_size // args.world_size
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_size=per_device_batch_size,
            num_workers=0,
            sampler=sampler,
            drop_last=True,
        )

        model = VICReg(args)
        model = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = LARS(
            model.parameters(),
            lr=0,
            weight_decay=args.wd,
            weight_decay_filter=exclude_bias_and_norm,
            lars_adaptation_filter=exclude_bias_and_norm,
        )

        start_epoch = 0
        scaler = torch.amp.GradScaler("cpu")
        epoch_losses = []
        for epoch in range(start_epoch, args.epochs):
            sampler.set_epoch(epoch)
            losses = []
            for step, ((x, y), _) in enumerate(loader, start=epoch * len(loader)):
                lr = adjust_learning_rate(args, optimizer, loader, step)

                optimizer.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = model.forward(x, y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                losses.append(loss.item())
            epoch_losses.append(sum(losses) / len(losses))
            print(dict(epoch=epoch, loss=round(epoch_losses[-1], 4), lr=round(lr, 5)))
        print(f"[summary] vicreg_loss first={epoch_losses[0]:.4f} last={epoch_losses[-1]:.4f} decreased={epoch_losses[-1] < epoch_losses[0]}")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
