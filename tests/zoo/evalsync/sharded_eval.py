# Evaluation passes over DistributedSampler shards on two gloo ranks. The first argument:
#   local   two metrics left per rank: a validation accuracy between epochs (a meter class), and
#           a test loss after training (each rank prints its own)
#   quiet   the same passes combined: the accuracy's sums all-reduced, the test predictions
#           gathered (all_gather_object); a loader over the whole set on every rank
#   rotating  the validation accuracy left per rank, over a shuffled DistributedSampler whose
#           set_epoch is called each epoch: every pass is a new random half (info, not a warning)
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Meter:
    def __init__(self):
        self.sum = self.count = 0.0

    def add(self, value, n):
        self.sum += value * n
        self.count += n


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, (x[:, :4].sum(1) > 0).long())


def main(mode):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    train_set, val_set, test_set = data(128, 1), data(64, 2), data(48, 3)
    train_sampler = DistributedSampler(train_set)
    train = DataLoader(train_set, batch_size=16, sampler=train_sampler)
    val_sampler = DistributedSampler(val_set, shuffle=mode == "rotating")
    val = DataLoader(val_set, batch_size=16, sampler=val_sampler)  # VAL
    test = DataLoader(test_set, batch_size=16, sampler=DistributedSampler(test_set, shuffle=False))  # TEST
    whole = DataLoader(val_set, batch_size=32)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(4 if mode == "rotating" else 2):
        train_sampler.set_epoch(epoch)
        if mode == "rotating":
            val_sampler.set_epoch(epoch)
        model.train()
        for x, y in train:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        acc = Meter()
        with torch.no_grad():
            for x, y in val:
                acc.add((model(x).argmax(1) == y).float().mean().item(), len(y))
            if mode == "quiet":
                t = torch.tensor([acc.sum, acc.count], dtype=torch.float64)
                dist.all_reduce(t)
                acc.sum, acc.count = t.tolist()
                for x, y in whole:
                    model(x)
        print(f"rank {rank} epoch {epoch} val acc {acc.sum / acc.count:.3f}")
    losses = []
    with torch.no_grad():
        for x, y in (test if mode != "rotating" else []):
            losses.append(F.cross_entropy(model(x), y, reduction="none"))
    if mode == "quiet":
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, torch.cat(losses).tolist())
        losses = [torch.tensor([v for part in every for v in part])]
    if losses:
        print(f"rank {rank} test loss {torch.cat(losses).mean().item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "quiet")
