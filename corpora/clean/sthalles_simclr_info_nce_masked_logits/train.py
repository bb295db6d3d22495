# Source: sthalles/SimCLR, simclr.py + models/resnet_simclr.py + run.py + utils.py,
# commit 1848fc934ad844ae630e6c452300433fe99acfd9
# https://github.com/sthalles/SimCLR/blob/master/simclr.py
#
# SimCLR InfoNCE built by boolean-mask indexing: the diagonal is removed with ~eye, positives and negatives are
# gathered with labels.bool() and concatenated so that the positive is always column 0 (all targets are 0);
# GradScaler/autocast constructed with enabled=False (fp16_precision off); the cosine scheduler is only stepped
# after a 10-epoch warmup, i.e. never in a short run.
# Adaptation: torchvision/STL10/tensorboard/tqdm unavailable: torchvision resnet18 -> 3-stage BasicBlock ResNet
# (width 16) with the same num_classes/fc replacement, STL10 + ContrastiveLearningViewGenerator -> 512 synthetic
# 16x16 images and two tensor-augmented views; torch.cuda.amp.GradScaler/autocast -> torch.amp (CPU) with the
# same enabled flag; SummaryWriter/logging/checkpoint removed (printing instead); batch 256 -> 64, out_dim 128,
# epochs 100 -> 5.
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


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


class ResNetSimCLR(nn.Module):

    def __init__(self, base_model, out_dim):
        super(ResNetSimCLR, self).__init__()
        self.resnet_dict = {"resnet18": resnet18(num_classes=out_dim)}

        self.backbone = self._get_basemodel(base_model)
        dim_mlp = self.backbone.fc.in_features

        # add mlp projection head
        self.backbone.fc = nn.Sequential(nn.Linear(dim_mlp, dim_mlp), nn.ReLU(), self.backbone.fc)

    def _get_basemodel(self, model_name):
        return self.resnet_dict[model_name]

    def forward(self, x):
        return self.backbone(x)


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


class SimCLR(object):

    def __init__(self, *args, **kwargs):
        self.args = kwargs['args']
        self.model = kwargs['model'].to(self.args.device)
        self.optimizer = kwargs['optimizer']
        self.scheduler = kwargs['scheduler']
        self.criterion = torch.nn.CrossEntropyLoss().to(self.args.device)

    def info_nce_loss(self, features):

        labels = torch.cat([torch.arange(self.args.batch_size) for i in range(self.args.n_views)], dim=0)
        labels = (labels.unsqueeze(0) == labels.unsqueeze(1)).float()
        labels = labels.to(self.args.device)

        features = F.normalize(features, dim=1)

        similarity_matrix = torch.matmul(features, features.T)

        # discard the main diagonal from both: labels and similarities matrix
        mask = torch.eye(labels.shape[0], dtype=torch.bool).to(self.args.device)
        labels = labels[~mask].view(labels.shape[0], -1)
        similarity_matrix = similarity_matrix[~mask].view(similarity_matrix.shape[0], -1)

        # select and combine multiple positives
        positives = similarity_matrix[labels.bool()].view(labels.shape[0], -1)

        # select only the negatives the negatives
        negatives = similarity_matrix[~labels.bool()].view(similarity_matrix.shape[0], -1)

        logits = torch.cat([positives, negatives], dim=1)
        labels = torch.zeros(logits.shape[0], dtype=torch.long).to(self.args.device)

        logits = logits / self.args.temperature
        return logits, labels

    def train(self, train_loader):

        scaler = torch.amp.GradScaler("cpu", enabled=self.args.fp16_precision)

        n_iter = 0
        history = []
        for epoch_counter in range(self.args.epochs):
            for images, _ in train_loader:
                images = torch.cat(images, dim=0)

                images = images.to(self.args.device)

                with torch.autocast("cpu", enabled=self.args.fp16_precision):
                    features = self.model(images)
                    logits, labels = self.info_nce_loss(features)
                    loss = self.criterion(logits, labels)

                self.optimizer.zero_grad()

                scaler.scale(loss).backward()

                scaler.step(self.optimizer)
                scaler.update()

                if n_iter % self.args.log_every_n_steps == 0:
                    top1, top5 = accuracy(logits, labels, topk=(1, 5))

                n_iter += 1

            # warmup for the first 10 epochs
            if epoch_counter >= 10:
                self.scheduler.step()
            print(f"Epoch: {epoch_counter}\tLoss: {loss.item():.4f}\tTop1 accuracy: {top1[0].item():.2f}")
            history.append((loss.item(), top1[0].item()))
        return history


class Args:
    batch_size, n_views, temperature, epochs, lr, weight_decay = 64, 2, 0.07, 5, 0.0003, 1e-4
    fp16_precision, log_every_n_steps, out_dim, arch = False, 1, 128, "resnet18"
    device = torch.device("cpu")


def main():
    args = Args()
    random.seed(0)
    train_dataset = SyntheticImages(512, transform=TwoCropsTransform(RandomAugment()))
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=True,
        num_workers=0, pin_memory=False, drop_last=True)

    model = ResNetSimCLR(base_model=args.arch, out_dim=args.out_dim)

    optimizer = torch.optim.Adam(model.parameters(), args.lr, weight_decay=args.weight_decay)

    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=len(train_loader), eta_min=0,
                                                           last_epoch=-1)
    simclr = SimCLR(model=model, optimizer=optimizer, scheduler=scheduler, args=args)
    history = simclr.train(train_loader)
    (l0, a0), (l1, a1) = history[0], history[-1]
    print(f"[summary] loss first={l0:.4f} last={l1:.4f} decreased={l1 < l0}")
    print(f"[summary] top1 first={a0:.2f} last={a1:.2f} increased={a1 > a0}")


if __name__ == "__main__":
    main()
