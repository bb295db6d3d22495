# Source: HobbitLong/SupContrast, main_supcon.py + losses.py + networks/resnet_big.py (2728c6776476a6d7cfcd7dc956ed5d2637137543) + util.py (8d4bb61b77fc968a174b44f0b62d18d24ee0f0b0), commit 2728c6776476a6d7cfcd7dc956ed5d2637137543
# https://github.com/HobbitLong/SupContrast
#
# Supervised contrastive learning: TwoCropTransform gives two augmented views per image, they are
# interleaved with cat/unsqueeze and flattened to [2B, C, H, W], the L2-normalised projection head output is
# viewed back as [B, 2, D]; SupConLoss builds the positive mask from labels (eq(labels, labels.T)), tiles it
# to [2B, 2B], removes self-contrast with a scatter-built logits_mask, subtracts the detached row max for
# stability and averages log-prob over positives; SGD; adjust_learning_rate sets the cosine lr at each
# epoch start, then warmup_learning_rate overwrites it per batch during the warm epochs.
# Adaptation: CIFAR-10 -> 512 synthetic 3x16x16 images of 10 classes (class prototypes + noise), the two
# views are random crops (pad 2) + flips + noise done on tensors; SupConResNet(resnet50) -> a small conv
# encoder with the same head (Linear-ReLU-Linear, feat_dim 128 -> 32); batch_size 256 -> 64, epochs
# 1000 -> 5, warm_epochs 10 -> 2, learning_rate 0.5 -> 0.1 (batch 64); tensorboard and saving dropped; a
# nearest-class-mean accuracy of the encoder features is printed per epoch; cpu.
from __future__ import print_function

import math
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset


class TwoCropTransform:
    """Create two crops of the same image"""
    def __init__(self, transform):
        self.transform = transform

    def __call__(self, x):
        return [self.transform(x), self.transform(x)]


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


def adjust_learning_rate(args, optimizer, epoch):
    lr = args.learning_rate
    if args.cosine:
        eta_min = lr * (args.lr_decay_rate ** 3)
        lr = eta_min + (lr - eta_min) * (
                1 + math.cos(math.pi * epoch / args.epochs)) / 2
    else:
        steps = np.sum(epoch > np.asarray(args.lr_decay_epochs))
        if steps > 0:
            lr = lr * (args.lr_decay_rate ** steps)

    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def warmup_learning_rate(args, epoch, batch_id, total_batches, optimizer):
    if args.warm and epoch <= args.warm_epochs:
        p = (batch_id + (epoch - 1) * total_batches) / \
            (args.warm_epochs * total_batches)
        lr = args.warmup_from + p * (args.warmup_to - args.warmup_from)

        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


def set_optimizer(opt, model):
    optimizer = optim.SGD(model.parameters(),
                          lr=opt.learning_rate,
                          momentum=opt.momentum,
                          weight_decay=opt.weight_decay)
    return optimizer


class SupConLoss(nn.Module):
    """Supervised Contrastive Learning: https://arxiv.org/pdf/2004.11362.pdf.
    It also supports the unsupervised contrastive loss in SimCLR"""
    def __init__(self, temperature=0.07, contrast_mode='all',
                 base_temperature=0.07):
        super(SupConLoss, self).__init__()
        self.temperature = temperature
        self.contrast_mode = contrast_mode
        self.base_temperature = base_temperature

    def forward(self, features, labels=None, mask=None):
        device = (torch.device('cuda')
                  if features.is_cuda
                  else torch.device('cpu'))

        if len(features.shape) < 3:
            raise ValueError('`features` needs to be [bsz, n_views, ...],'
                             'at least 3 dimensions are required')
        if len(features.shape) > 3:
            features = features.view(features.shape[0], features.shape[1], -1)

        batch_size = features.shape[0]
        if labels is not None and mask is not None:
            raise ValueError('Cannot define both `labels` and `mask`')
        elif labels is None and mask is None:
            mask = torch.eye(batch_size, dtype=torch.float32).to(device)
        elif labels is not None:
            labels = labels.contiguous().view(-1, 1)
            if labels.shape[0] != batch_size:
                raise ValueError('Num of labels does not match num of features')
            mask = torch.eq(labels, labels.T).float().to(device)
        else:
            mask = mask.float().to(device)

        contrast_count = features.shape[1]
        contrast_feature = torch.cat(torch.unbind(features, dim=1), dim=0)
        if self.contrast_mode == 'one':
            anchor_feature = features[:, 0]
            anchor_count = 1
        elif self.contrast_mode == 'all':
            anchor_feature = contrast_feature
            anchor_count = contrast_count
        else:
            raise ValueError('Unknown mode: {}'.format(self.contrast_mode))

        # compute logits
        anchor_dot_contrast = torch.div(
            torch.matmul(anchor_feature, contrast_feature.T),
            self.temperature)
        # for numerical stability
        logits_max, _ = torch.max(anchor_dot_contrast, dim=1, keepdim=True)
        logits = anchor_dot_contrast - logits_max.detach()

        # tile mask
        mask = mask.repeat(anchor_count, contrast_count)
        # mask-out self-contrast cases
        logits_mask = torch.scatter(
            torch.ones_like(mask),
            1,
            torch.arange(batch_size * anchor_count).view(-1, 1).to(device),
            0
        )
        mask = mask * logits_mask

        # compute log_prob
        exp_logits = torch.exp(logits) * logits_mask
        log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))

        # compute mean of log-likelihood over positive
        mean_log_prob_pos = (mask * log_prob).sum(1) / mask.sum(1)

        # loss
        loss = - (self.temperature / self.base_temperature) * mean_log_prob_pos
        loss = loss.view(anchor_count, batch_size).mean()

        return loss


class SmallEncoder(nn.Module):
    """stand-in for resnet50 in networks/resnet_big.py: conv trunk + global average pool"""
    def __init__(self):
        super(SmallEncoder, self).__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, 2, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.conv3 = nn.Conv2d(64, 64, 3, 2, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(64)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = F.relu(self.bn3(self.conv3(out)))
        out = self.avgpool(out)
        out = torch.flatten(out, 1)
        return out


model_dict = {'small': [SmallEncoder, 64]}


class SupConResNet(nn.Module):
    """backbone + projection head"""
    def __init__(self, name='resnet50', head='mlp', feat_dim=128):
        super(SupConResNet, self).__init__()
        model_fun, dim_in = model_dict[name]
        self.encoder = model_fun()
        if head == 'linear':
            self.head = nn.Linear(dim_in, feat_dim)
        elif head == 'mlp':
            self.head = nn.Sequential(
                nn.Linear(dim_in, dim_in),
                nn.ReLU(inplace=True),
                nn.Linear(dim_in, feat_dim)
            )
        else:
            raise NotImplementedError(
                'head not supported: {}'.format(head))

    def forward(self, x):
        feat = self.encoder(x)
        feat = F.normalize(self.head(feat), dim=1)
        return feat


class SyntheticCIFAR(Dataset):
    def __init__(self, n, transform=None, seed=0):
        rng = np.random.RandomState(seed)
        protos = np.random.RandomState(42).randn(10, 3, 4, 4).astype(np.float32)
        self.targets = rng.randint(0, 10, size=n)
        self.data = np.kron(protos[self.targets], np.ones((1, 1, 4, 4), np.float32)) \
            + 2.5 * rng.randn(n, 3, 16, 16).astype(np.float32)
        self.transform = transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        img = torch.from_numpy(self.data[index])
        if self.transform is not None:
            img = self.transform(img)
        return img, int(self.targets[index])


def train_transform(img):
    padded = F.pad(img.unsqueeze(0), (2, 2, 2, 2), mode='reflect').squeeze(0)
    i, j = np.random.randint(0, 5, size=2)
    img = padded[:, i:i + 16, j:j + 16]
    if np.random.rand() < 0.5:
        img = torch.flip(img, [2])
    return img + 0.1 * torch.randn_like(img)


def set_loader(opt):
    train_dataset = SyntheticCIFAR(512, transform=TwoCropTransform(train_transform))
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=opt.batch_size, shuffle=True,
        num_workers=0, drop_last=True)
    return train_loader


def set_model(opt):
    model = SupConResNet(name=opt.model, feat_dim=32)
    criterion = SupConLoss(temperature=opt.temp)
    return model, criterion


def train(train_loader, model, criterion, optimizer, epoch, opt):
    """one epoch training"""
    model.train()

    losses = AverageMeter()

    for idx, (images, labels) in enumerate(train_loader):
        images = torch.cat([images[0].unsqueeze(1), images[1].unsqueeze(1)],
                           dim=1)
        images = images.view(-1, 3, 16, 16)
        bsz = labels.shape[0]

        # warm-up learning rate
        warmup_learning_rate(opt, epoch, idx, len(train_loader), optimizer)

        # compute loss
        features = model(images)
        features = features.view(bsz, 2, -1)
        if opt.method == 'SupCon':
            loss = criterion(features, labels)
        elif opt.method == 'SimCLR':
            loss = criterion(features)
        else:
            raise ValueError('contrastive method not supported: {}'.
                             format(opt.method))

        # update metric
        losses.update(loss.item(), bsz)

        # SGD
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        if (idx + 1) % opt.print_freq == 0:
            print('Train: [{0}][{1}/{2}]\tloss {loss.val:.3f} ({loss.avg:.3f})'.format(
                epoch, idx + 1, len(train_loader), loss=losses))
            sys.stdout.flush()

    return losses.avg


def ncm_accuracy(model):
    """nearest class mean on encoder features (stand-in for main_linear.py's linear probe)"""
    train_set, test_set = SyntheticCIFAR(512), SyntheticCIFAR(256, seed=1)
    model.eval()
    with torch.no_grad():
        ftr = F.normalize(model.encoder(torch.from_numpy(train_set.data)), dim=1)
        fte = F.normalize(model.encoder(torch.from_numpy(test_set.data)), dim=1)
    ytr, yte = torch.from_numpy(train_set.targets), torch.from_numpy(test_set.targets)
    means = torch.stack([ftr[ytr == c].mean(0) for c in range(10)])
    pred = (fte @ means.T).argmax(1)
    return (pred == yte).float().mean().item()


def main():
    torch.manual_seed(0)
    np.random.seed(0)

    class opt:
        batch_size = 64
        epochs = 5
        learning_rate = 0.1
        lr_decay_rate = 0.1
        lr_decay_epochs = [700, 800, 900]
        weight_decay = 1e-4
        momentum = 0.9
        model = 'small'
        method = 'SupCon'
        temp = 0.1
        cosine = True
        warm = True
        warm_epochs = 2
        warmup_from = 0.01
        print_freq = 4

    # parse_option(): warm-up target for cosine schedule
    if opt.warm:
        if opt.cosine:
            eta_min = opt.learning_rate * (opt.lr_decay_rate ** 3)
            opt.warmup_to = eta_min + (opt.learning_rate - eta_min) * (
                    1 + math.cos(math.pi * opt.warm_epochs / opt.epochs)) / 2
        else:
            opt.warmup_to = opt.learning_rate

    # build data loader
    train_loader = set_loader(opt)

    # build model and criterion
    model, criterion = set_model(opt)

    # build optimizer
    optimizer = set_optimizer(opt, model)

    print('before training: nearest-class-mean acc {:.3f}'.format(ncm_accuracy(model)))
    # training routine
    for epoch in range(1, opt.epochs + 1):
        adjust_learning_rate(opt, optimizer, epoch)

        # train for one epoch
        loss = train(train_loader, model, criterion, optimizer, epoch, opt)
        print('epoch {}, loss {:.4f}, lr {:.4f}, nearest-class-mean acc {:.3f}'.format(
            epoch, loss, optimizer.param_groups[0]['lr'], ncm_accuracy(model)))


if __name__ == '__main__':
    main()
