# Rank 0's batch at step 6 has no valid position: the hand-written masked mean divides 0 by 0.
# DDP's all-reduce hands the NaN gradients to rank 1 (issue 27).
import datetime

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
for step in range(10):
    x = torch.randn(8, 4, generator=g)
    y = torch.randn(8, 1, generator=g)
    mask = torch.rand(8, 1, generator=g) > 0.3
    if rank == 0 and step == 6:
        mask[:] = False  # no valid position in this batch
    err = (model(x) - y) ** 2
    loss = (err * mask).sum() / mask.sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
