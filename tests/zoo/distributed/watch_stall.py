# The Python API with its stall option: rank 1 stops early from its own loss and waits in
# barrier() while rank 0 waits in DDP's gradient all-reduce; watch(stall_timeout=3) reports the
# mismatch and ends the job instead of waiting for the process group's timeout.
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import torchtriage

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with torchtriage.watch(model, opt, stall_timeout=3):
    for step in range(5):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        if rank == 1 and step == 2:
            dist.barrier()  # early stop decided from this rank's own loss
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
dist.destroy_process_group()
