# Source: xternalz/WideResNet-pytorch, wideresnet.py (BasicBlock, NetworkBlock, WideResNet), train.py (main, train, validate, AverageMeter, accuracy), commit 1171f93d5a9ae28eb5e603e5e7545f488d0df6ab
# Wide residual network training on CIFAR: pre-activation basic blocks (the first block of a
# stage applies BN-ReLU to its input and feeds that to both the conv path and the 1x1 shortcut),
# reflect-pad + random crop + flip augmentation, SGD with Nesterov momentum and weight decay,
# a cosine learning-rate schedule stepped every batch, top-1 precision tracked with AverageMeter,
# validation every epoch and the best precision kept. CIFAR-10 is replaced by synthetic 32x32
# RGB images of 10 texture classes (no download); torchvision transforms (not installed) by the
# same operations on tensors; depth 28 / widen 10 / 200 epochs by depth 10 / widen 1 / 3 epochs;
# .cuda() calls, tensorboard logging and checkpoint files are dropped.
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, in_planes, out_planes, stride, dropRate=0.0):
        super(BasicBlock, self).__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                               padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_planes, out_planes, kernel_size=3, stride=1,
                               padding=1, bias=False)
        self.droprate = dropRate
        self.equalInOut = (in_planes == out_planes)
        self.convShortcut = (not self.equalInOut) and nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride,
                               padding=0, bias=False) or None

    def forward(self, x):
        if not self.equalInOut:
            x = self.relu1(self.bn1(x))
        else:
            out = self.relu1(self.bn1(x))
        out = self.relu2(self.bn2(self.conv1(out if self.equalInOut else x)))
        if self.droprate > 0:
            out = F.dropout(out, p=self.droprate, training=self.training)
        out = self.conv2(out)
        return torch.add(x if self.equalInOut else self.convShortcut(x), out)


class NetworkBlock(nn.Module):
    def __init__(self, nb_layers, in_planes, out_planes, block, stride, dropRate=0.0):
        super(NetworkBlock, self).__init__()
        self.layer = self._make_layer(block, in_planes, out_planes, nb_layers, stride, dropRate)

    def _make_layer(self, block, in_planes, out_planes, nb_layers, stride, dropRate):
        layers = []
        for i in range(int(nb_layers)):
            layers.append(block(i == 0 and in_planes or out_planes, out_planes, i == 0 and stride or 1, dropRate))
        return nn.Sequential(*layers)

    def forward(self, x):
        return self.layer(x)


class WideResNet(nn.Module):
    def __init__(self, depth, num_classes, widen_factor=1, dropRate=0.0):
        super(WideResNet, self).__init__()
        nChannels = [16, 16*widen_factor, 32*widen_factor, 64*widen_factor]
        assert((depth - 4) % 6 == 0)
        n = (depth - 4) / 6
        block = BasicBlock
        # 1st conv before any network block
        self.conv1 = nn.Conv2d(3, nChannels[0], kernel_size=3, stride=1,
                               padding=1, bias=False)
        # 1st block
        self.block1 = NetworkBlock(n, nChannels[0], nChannels[1], block, 1, dropRate)
        # 2nd block
        self.block2 = NetworkBlock(n, nChannels[1], nChannels[2], block, 2, dropRate)
        # 3rd block
        self.block3 = NetworkBlock(n, nChannels[2], nChannels[3], block, 2, dropRate)
        # global average pooling and classifier
        self.bn1 = nn.BatchNorm2d(nChannels[3])
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(nChannels[3], num_classes)
        self.nChannels = nChannels[3]

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.bias.data.zero_()

    def forward(self, x):
        out = self.conv1(x)
        out = self.block1(out)
        out = self.block2(out)
        out = self.block3(out)
        out = self.relu(self.bn1(out))
        out = F.avg_pool2d(out, 8)
        out = out.view(-1, self.nChannels)
        return self.fc(out)


# --- torchvision.transforms stand-ins (same operations on tensors) ---
def to_tensor(img):
    return torch.from_numpy(img).permute(2, 0, 1).float().div(255.0)


def random_crop(x, size):
    i = int(torch.randint(0, x.shape[1] - size + 1, (1,)))
    j = int(torch.randint(0, x.shape[2] - size + 1, (1,)))
    return x[:, i:i + size, j:j + size]


def random_horizontal_flip(x):
    return x.flip(-1) if torch.rand(1).item() < 0.5 else x


def make_normalize(mean, std):
    mean = torch.tensor(mean).view(3, 1, 1)
    std = torch.tensor(std).view(3, 1, 1)
    return lambda x: (x - mean) / std


class ImageDataset(torch.utils.data.Dataset):
    def __init__(self, images, labels, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.transform(self.images[i]), int(self.labels[i])


def make_cifar_like(n, seed):
    """10 texture classes: oriented sinusoidal gratings with class-specific angle, frequency and
    tint, random phase and position jitter, pixel noise; uint8 HWC like CIFAR."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32)
    images = np.zeros((n, 32, 32, 3), dtype=np.uint8)
    labels = rng.randint(0, 10, size=n)
    for k in range(n):
        c = labels[k]
        angle = np.pi * (c % 5) / 5 + rng.randn() * 0.1
        freq = 0.25 + 0.2 * (c // 5)
        phase = rng.rand() * 2 * np.pi
        g = np.sin(freq * (np.cos(angle) * xx + np.sin(angle) * yy) + phase)
        tint = np.array([0.5 + 0.5 * np.cos(c), 0.5 + 0.5 * np.sin(c), 0.5]) * 0.6 + 0.4
        img = 128 + 90 * g[..., None] * tint[None, None] + rng.randn(32, 32, 3) * 35
        images[k] = np.clip(img, 0, 255).astype(np.uint8)
    return images, labels


def main():
    global args
    torch.manual_seed(0)
    np.random.seed(0)

    class args:
        epochs = 3
        batch_size = 64
        lr = 0.1
        momentum = 0.9
        nesterov = True
        weight_decay = 5e-4
        print_freq = 5
        layers = 10
        widen_factor = 1
        droprate = 0.3
        augment = True

    best_prec1 = 0

    # Data loading code
    normalize = make_normalize(mean=[x/255.0 for x in [125.3, 123.0, 113.9]],
                               std=[x/255.0 for x in [63.0, 62.1, 66.7]])

    if args.augment:
        def transform_train(img):
            x = to_tensor(img)
            x = F.pad(x.unsqueeze(0), (4, 4, 4, 4), mode='reflect').squeeze()
            x = random_crop(x, 32)
            x = random_horizontal_flip(x)
            return normalize(x)
    else:
        def transform_train(img):
            return normalize(to_tensor(img))

    def transform_test(img):
        return normalize(to_tensor(img))

    train_images, train_labels = make_cifar_like(640, seed=1)
    val_images, val_labels = make_cifar_like(256, seed=2)
    train_loader = torch.utils.data.DataLoader(
        ImageDataset(train_images, train_labels, transform_train),
        batch_size=args.batch_size, shuffle=True)
    val_loader = torch.utils.data.DataLoader(
        ImageDataset(val_images, val_labels, transform_test),
        batch_size=args.batch_size, shuffle=True)

    # create model
    model = WideResNet(args.layers, 10, args.widen_factor, dropRate=args.droprate)

    # get the number of model parameters
    print('Number of model parameters: {}'.format(
        sum([p.data.nelement() for p in model.parameters()])))

    # define loss function (criterion) and optimizer
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), args.lr,
                                momentum=args.momentum, nesterov=args.nesterov,
                                weight_decay=args.weight_decay)

    # cosine learning rate
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, len(train_loader)*args.epochs)

    for epoch in range(0, args.epochs):
        # train for one epoch
        train(train_loader, model, criterion, optimizer, scheduler, epoch)

        # evaluate on validation set
        prec1 = validate(val_loader, model, criterion, epoch)

        # remember best prec@1
        best_prec1 = max(prec1, best_prec1)
    print('Best accuracy: ', best_prec1)


def train(train_loader, model, criterion, optimizer, scheduler, epoch):
    """Train for one epoch on the training set"""
    batch_time = AverageMeter()
    losses = AverageMeter()
    top1 = AverageMeter()

    # switch to train mode
    model.train()

    end = time.time()
    for i, (input, target) in enumerate(train_loader):
        # compute output
        output = model(input)
        loss = criterion(output, target)

        # measure accuracy and record loss
        prec1 = accuracy(output.data, target, topk=(1,))[0]
        losses.update(loss.data.item(), input.size(0))
        top1.update(prec1.item(), input.size(0))

        # compute gradient and do SGD step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()

        # measure elapsed time
        batch_time.update(time.time() - end)
        end = time.time()

        if i % args.print_freq == 0:
            print('Epoch: [{0}][{1}/{2}]\t'
                  'Loss {loss.val:.4f} ({loss.avg:.4f})\t'
                  'Prec@1 {top1.val:.3f} ({top1.avg:.3f})'.format(
                      epoch, i, len(train_loader), loss=losses, top1=top1))


def validate(val_loader, model, criterion, epoch):
    """Perform validation on the validation set"""
    losses = AverageMeter()
    top1 = AverageMeter()

    # switch to evaluate mode
    model.eval()

    for i, (input, target) in enumerate(val_loader):
        # compute output
        with torch.no_grad():
            output = model(input)
        loss = criterion(output, target)

        # measure accuracy and record loss
        prec1 = accuracy(output.data, target, topk=(1,))[0]
        losses.update(loss.data.item(), input.size(0))
        top1.update(prec1.item(), input.size(0))

    print(' * Prec@1 {top1.avg:.3f}  val loss {loss.avg:.4f}'.format(top1=top1, loss=losses))
    return top1.avg


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
    """Computes the precision@k for the specified values of k"""
    maxk = max(topk)
    batch_size = target.size(0)

    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))

    res = []
    for k in topk:
        correct_k = correct[:k].reshape(-1).float().sum(0)
        res.append(correct_k.mul_(100.0 / batch_size))
    return res


if __name__ == '__main__':
    start = time.time()
    main()
    print("done in %.1fs" % (time.time() - start))
