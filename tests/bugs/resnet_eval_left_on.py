"""torchvision's classification reference: train_one_epoch with a MetricLogger-style meter,
CrossEntropyLoss, SGD (momentum, weight decay), accuracy top-1 / top-5 read with .item() on the
training output, lr read from param_groups[0]; evaluate() in eval() + no_grad; StepLR per epoch;
a RandomSampler / SequentialSampler pair; the checkpoint dict (model, optimizer, lr_scheduler,
epoch) saved every epoch.

Source: pytorch/vision, references/classification/train.py, commit bde124ee2f3419fe31ad79c858af40206e8bf792.
Reduced: a toy-width ResNet (_nets.py) for torchvision.models.resnet18, 16x16 images, 10 classes,
3 train batches, 1 test batch, 1 epoch (this copy: 2); checkpoints go to an in-memory buffer.

Mutation: `model.train()` dropped from the top of `train_one_epoch` (two epochs): after `evaluate()` the second epoch trains in eval() mode, with frozen BatchNorm statistics.
Expected: warning silent.eval_mode_while_training on the root model (its BatchNorm modules in the evidence), at `output = model(image)`.
"""

import io

import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, TensorDataset

from corpus._nets import resnet


def accuracy(output, target, topk=(1,)):
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target[None])
        return [correct[:k].flatten().sum(dtype=torch.float32) * (100.0 / batch_size) for k in topk]


def build():
    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(24, 3, 16, 16), torch.randint(0, 10, (24,)))
    dataset_test = TensorDataset(torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,)))
    data_loader = DataLoader(dataset, batch_size=8, sampler=RandomSampler(dataset))
    data_loader_test = DataLoader(dataset_test, batch_size=8, sampler=SequentialSampler(dataset_test))
    model = resnet(num_classes=10)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.1)

    def train_one_epoch(epoch):
        meters = {"loss": [], "lr": [], "acc1": [], "acc5": []}
        for image, target in data_loader:
            output = model(image)  # <- bug
            loss = criterion(output, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            acc1, acc5 = accuracy(output, target, topk=(1, 5))
            meters["loss"].append(loss.item())
            meters["lr"].append(optimizer.param_groups[0]["lr"])
            meters["acc1"].append(acc1.item())
            meters["acc5"].append(acc5.item())

    def evaluate():
        model.eval()
        with torch.no_grad():
            for image, target in data_loader_test:
                output = model(image)
                loss = criterion(output, target)
                acc1, acc5 = accuracy(output, target, topk=(1, 5))
        return acc1.item(), loss.item()

    def train():
        model.train()
        for epoch in range(0, 2):
            train_one_epoch(epoch)
            lr_scheduler.step()
            evaluate()
            checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                          "lr_scheduler": lr_scheduler.state_dict(), "epoch": epoch}
            torch.save(checkpoint, io.BytesIO())

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
