"""Metrics reduced across two gloo ranks: "bug" reduces one accuracy three times (lines copied for
the other metrics without changing their tensor), "fixed" reduces each once; "avg" reduces one
tensor twice with AVG (idempotent: quiet)."""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

mode = sys.argv[1]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
x = torch.randn(128, 8); y = (x[:, 0] > 0).long()
mine = slice(rank * 64, (rank + 1) * 64)
model = DistributedDataParallel(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    opt.zero_grad(); F.cross_entropy(model(x[mine]), y[mine]).backward(); opt.step()
    with torch.no_grad():
        pred = model(x[mine]).argmax(1)
    train_acc = (pred[:32] == y[mine][:32]).float().mean()
    val_acc = (pred[32:] == y[mine][32:]).float().mean()
    if mode == "bug":
        dist.all_reduce(train_acc, op=dist.ReduceOp.SUM)
        dist.all_reduce(train_acc, op=dist.ReduceOp.SUM)  # HERE
        dist.all_reduce(train_acc, op=dist.ReduceOp.SUM)
    elif mode == "avg":
        dist.all_reduce(train_acc, op=dist.ReduceOp.AVG if hasattr(dist.ReduceOp, "AVG") else dist.ReduceOp.MAX)
        dist.all_reduce(train_acc, op=dist.ReduceOp.MAX)
        dist.all_reduce(val_acc, op=dist.ReduceOp.SUM)
    else:
        dist.all_reduce(train_acc, op=dist.ReduceOp.SUM)
        dist.all_reduce(val_acc, op=dist.ReduceOp.SUM)
    train_acc /= world
    val_acc /= world
dist.destroy_process_group()
