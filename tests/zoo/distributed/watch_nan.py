# The Python API inside a DDP script: watch() on every rank, one merged report from rank 0.
import datetime
import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import torchtriage

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with torchtriage.watch(model, opt, on_anomaly="record", stall_timeout=10) as session:
    for step in range(3):
        x = torch.randn(8, 4)
        h = model(x)
        if rank == 0 and step == 1:
            h = torch.log(h - 10.0)  # log of a negative number on rank 0 only
        loss = h.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
if rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(session.report.to_dict(), fh)
dist.destroy_process_group()
