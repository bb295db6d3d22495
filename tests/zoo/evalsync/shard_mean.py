# Validation under DDP (two gloo ranks): each rank sums the loss of its DistributedSampler shard.
#   bug    the sum is divided by len(loader.dataset), the whole set: every rank reports half its mean
#   fixed  the sum is divided by the samples this rank saw (the shard changes each epoch: set_epoch)
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def validate(loader, model):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += F.mse_loss(model(x), y).item() * len(x)
    model.train()
    return total / len(loader.dataset)  # HERE


def validate_fixed(loader, model):
    model.eval()
    total, seen = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            total += F.mse_loss(model(x), y).item() * len(x)
            seen += len(x)
    model.train()
    if seen == 0:
        return total / len(loader.dataset)  # (never runs: a branch is not judged)
    return total / seen


def main(mode):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    X = torch.randn(192, 4, generator=g)
    train_set, val_set = TensorDataset(X[:128], X[:128].sum(1, keepdim=True)), TensorDataset(X[128:], X[128:].sum(1, keepdim=True))
    train_sampler, val_sampler = DistributedSampler(train_set), DistributedSampler(val_set)
    train = DataLoader(train_set, batch_size=16, sampler=train_sampler)
    val = DataLoader(val_set, batch_size=16, sampler=val_sampler)
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(4):
        train_sampler.set_epoch(epoch)
        val_sampler.set_epoch(epoch)
        for x, y in train:
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
        print(f"rank {dist.get_rank()} epoch {epoch} val loss {(validate if mode == 'bug' else validate_fixed)(val, model):.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fixed")
