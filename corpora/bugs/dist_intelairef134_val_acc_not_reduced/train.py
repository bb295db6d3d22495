# Report: https://github.com/intel/ai-reference-models/pull/134
# Run: torchrun --nproc-per-node 2 train.py
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


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


def accuracy(output, target, topk=(1,)):
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
        return [correct[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / batch_size) for k in topk]


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 20, generator=g)
    y = (x[:, :10].sum(1) > 0).long() + 2 * (x[:, 10:].sum(1) > 0).long()
    noisy = torch.arange(n) % 2 == 1
    y[noisy] = torch.randint(0, 4, (int(noisy.sum()),), generator=g)
    return TensorDataset(x, y)


def validate(val_loader, model, criterion):
    top1 = AverageMeter('Acc@1', ':6.2f')
    model.eval()
    with torch.no_grad():
        for i, (images, target) in enumerate(val_loader):
            output = model(images)
            loss = criterion(output, target)
            acc1, = accuracy(output, target, topk=(1,))
            top1.update(acc1[0], images.size(0))
    return top1.avg


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    train_dataset, val_dataset = make_data(512, 0), make_data(256, 1)
    train_sampler = DistributedSampler(train_dataset)
    val_sampler = DistributedSampler(val_dataset, shuffle=False, drop_last=True)
    train_loader = DataLoader(train_dataset, batch_size=32, sampler=train_sampler)
    val_loader = DataLoader(val_dataset, batch_size=32, sampler=val_sampler)
    model = DDP(nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4)))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9)
    best_acc1 = 0
    for epoch in range(4):
        train_sampler.set_epoch(epoch)
        model.train()
        for images, target in train_loader:
            loss = criterion(model(images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        acc1 = validate(val_loader, model, criterion)
        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)
        shown = [None] * dist.get_world_size()
        dist.all_gather_object(shown, (round(float(acc1), 3), bool(is_best)))
        if rank == 0:
            print(f"epoch {epoch} * Acc@1 / is_best printed by each rank: {shown}")
    model.eval()
    with torch.no_grad():
        x, y = val_dataset.tensors
        full = (model(x).argmax(1) == y).float().mean().item() * 100
    if rank == 0:
        print(f"Acc@1 over the whole validation set: {full:.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
