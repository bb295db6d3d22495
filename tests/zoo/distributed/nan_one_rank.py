# Rank 1's batch at step 2 holds a NaN; DDP's all-reduce hands it to rank 0. With the argument
# "metric", each step also all-reduces the loss for logging (a collective of the step's own).
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(rank)
for step in range(4):
    x = torch.randn(8, 4, generator=g)
    if rank == 1 and step == 2:
        x[3, 1] = float("nan")  # a corrupt sample on one rank
    loss = model(x).pow(2).mean()
    if sys.argv[1:] == ["metric"]:
        logged = loss.detach().clone()
        dist.all_reduce(logged)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
