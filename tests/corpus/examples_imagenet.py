"""ImageNet classification: AverageMeter bookkeeping, top-1/top-5 accuracy from output.topk in the
training loop (on the graph's output), SGD + momentum + weight decay, StepLR, validate() under
eval() + no_grad, best-acc checkpoint dict via state_dict().

Source: pytorch/examples, imagenet/main.py (train, validate, accuracy, AverageMeter), commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
Reduced: a toy-width ResNet (_nets.py) for torchvision's resnet18, 16x16 images, 10 classes,
3 train batches + 1 validation batch; the checkpoint goes to an in-memory buffer.
"""

import io

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

from corpus._nets import resnet


class AverageMeter(object):
    def __init__(self, name):
        self.name = name
        self.reset()

    def reset(self):
        self.val = self.avg = self.sum = self.count = 0

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
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


def build():
    torch.manual_seed(0)
    train_loader = DataLoader(TensorDataset(torch.randn(24, 3, 16, 16), torch.randint(0, 10, (24,))),
                              batch_size=8, shuffle=True)
    val_loader = DataLoader(TensorDataset(torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))), batch_size=8)
    model = resnet(num_classes=10)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    scheduler = StepLR(optimizer, step_size=30, gamma=0.1)

    def train_epoch():
        losses, top1, top5 = AverageMeter("Loss"), AverageMeter("Acc@1"), AverageMeter("Acc@5")
        model.train()
        for i, (images, target) in enumerate(train_loader):
            output = model(images)
            loss = criterion(output, target)
            acc1, acc5 = accuracy(output, target, topk=(1, 5))
            losses.update(loss.item(), images.size(0))
            top1.update(acc1[0], images.size(0))
            top5.update(acc5[0], images.size(0))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    def validate():
        losses, top1 = AverageMeter("Loss"), AverageMeter("Acc@1")
        model.eval()
        with torch.no_grad():
            for i, (images, target) in enumerate(val_loader):
                output = model(images)
                loss = criterion(output, target)
                acc1, acc5 = accuracy(output, target, topk=(1, 5))
                losses.update(loss.item(), images.size(0))
                top1.update(acc1[0], images.size(0))
        return top1.avg

    def train():
        best_acc1 = 0
        for epoch in range(1):
            train_epoch()
            acc1 = validate()
            scheduler.step()
            best_acc1 = max(acc1, best_acc1)
            torch.save({"epoch": epoch + 1, "state_dict": model.state_dict(), "best_acc1": best_acc1,
                        "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, io.BytesIO())

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
