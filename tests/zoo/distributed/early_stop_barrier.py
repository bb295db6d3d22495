# Rank 1 stops early from its own loss and waits in barrier(); rank 0 goes on into backward(),
# whose gradient all-reduce waits for rank 1: without torchtriage this hangs until the process
# group's timeout.
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    x = torch.randn(8, 4)
    loss = model(x).pow(2).mean()
    if rank == 1 and step == 2:
        dist.barrier()  # early stop decided from this rank's own loss
        break
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
