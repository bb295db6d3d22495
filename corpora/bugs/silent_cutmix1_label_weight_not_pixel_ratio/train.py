# Source: clovaai/CutMix-PyTorch, train.py, commit 635fa653de64137f1513d1ed0774e86d154c29f3
# Report: https://github.com/clovaai/CutMix-PyTorch/issues/1
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Args:
    beta = 1.0
    cutmix_prob = 0.5
    epochs = 6
    print_freq = 10
    verbose = False


args = Args()


class AverageMeter(object):
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
    """Computes the top-k error"""
    maxk = max(topk)
    batch_size = target.size(0)
    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))
    res = []
    for k in topk:
        correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
        wrong_k = batch_size - correct_k
        res.append(wrong_k.mul_(100.0 / batch_size))
    return res


def rand_bbox(size, lam):
    W = size[2]
    H = size[3]
    cut_rat = np.sqrt(1. - lam)
    cut_w = int(W * cut_rat)
    cut_h = int(H * cut_rat)

    # uniform
    cx = np.random.randint(W)
    cy = np.random.randint(H)

    bbx1 = np.clip(cx - cut_w // 2, 0, W)
    bby1 = np.clip(cy - cut_h // 2, 0, H)
    bbx2 = np.clip(cx + cut_w // 2, 0, W)
    bby2 = np.clip(cy + cut_h // 2, 0, H)

    return bbx1, bby1, bbx2, bby2


def train(train_loader, model, criterion, optimizer, epoch):
    losses = AverageMeter()
    top1 = AverageMeter()
    weight_gap = AverageMeter()

    # switch to train mode
    model.train()

    for i, (input, target) in enumerate(train_loader):
        r = np.random.rand(1)
        if args.beta > 0 and r < args.cutmix_prob:
            # generate mixed sample
            lam = np.random.beta(args.beta, args.beta)
            rand_index = torch.randperm(input.size()[0])
            target_a = target
            target_b = target[rand_index]
            bbx1, bby1, bbx2, bby2 = rand_bbox(input.size(), lam)
            input[:, :, bbx1:bbx2, bby1:bby2] = input[rand_index, :, bbx1:bbx2, bby1:bby2]
            # compute output
            input_var = torch.autograd.Variable(input, requires_grad=True)
            target_a_var = torch.autograd.Variable(target_a)
            target_b_var = torch.autograd.Variable(target_b)
            output = model(input_var)
            loss = criterion(output, target_a_var) * lam + criterion(output, target_b_var) * (1. - lam)
            kept = 1 - ((bbx2 - bbx1) * (bby2 - bby1) / (input.size()[-1] * input.size()[-2]))
            weight_gap.update(abs(lam - kept))
        else:
            # compute output
            input_var = torch.autograd.Variable(input, requires_grad=True)
            target_var = torch.autograd.Variable(target)
            output = model(input_var)
            loss = criterion(output, target_var)

        # measure accuracy and record loss
        err1, = accuracy(output.data, target, topk=(1,))

        losses.update(loss.item(), input.size(0))
        top1.update(err1.item(), input.size(0))

        # compute gradient and do SGD step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    print('* Epoch: [{0}/{1}]\t Top 1-err {top1.avg:.3f}\t Train Loss {loss.avg:.3f}\t '
          'mean |label weight - share of pixels from image a| {gap.avg:.3f}'.format(
              epoch, args.epochs, top1=top1, loss=losses, gap=weight_gap))
    return losses.avg


def validate(val_loader, model, criterion, epoch):
    top1 = AverageMeter()
    losses = AverageMeter()
    model.eval()
    with torch.no_grad():
        for input, target in val_loader:
            output = model(input)
            loss = criterion(output, target)
            err1, = accuracy(output.data, target, topk=(1,))
            losses.update(loss.item(), input.size(0))
            top1.update(err1.item(), input.size(0))
    print('* Epoch: [{0}/{1}]\t Test Top 1-err {top1.avg:.3f}\t Test Loss {loss.avg:.3f}'.format(
        epoch, args.epochs, top1=top1, loss=losses))
    return top1.avg


def make_images(n, rng, protos):
    y = rng.randint(0, 10, n)
    x = protos[y] + rng.normal(0, 3.0, (n, 3, 16, 16))
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y)


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    protos = rng.normal(0, 1, (10, 3, 16, 16))
    train_loader = DataLoader(TensorDataset(*make_images(1280, rng, protos)), batch_size=64, shuffle=True)
    val_loader = DataLoader(TensorDataset(*make_images(512, rng, protos)), batch_size=128, shuffle=False)

    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(128, 10))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), 0.05, momentum=0.9, weight_decay=1e-4, nesterov=True)

    best_err1 = 100
    for epoch in range(0, args.epochs):
        train(train_loader, model, criterion, optimizer, epoch)
        err1 = validate(val_loader, model, criterion, epoch)
        best_err1 = min(err1, best_err1)
    print('Best accuracy (top-1 error):', best_err1)


if __name__ == '__main__':
    main()
