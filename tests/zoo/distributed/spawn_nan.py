# torch.multiprocessing.spawn (no torchrun, so no launcher store): watch() in each worker after
# init_process_group; rank 1's batch at step 1 holds a NaN. Rank 0 writes the merged report.
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import torchtriage


def worker(rank, out):
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    with torchtriage.watch(model, opt, on_anomaly="record", stall_timeout=10) as session:
        for step in range(3):
            x = torch.randn(8, 4, generator=g)
            if rank == 1 and step == 1:
                x[0, 0] = float("nan")  # a corrupt sample on one rank
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    if rank == 0:
        with open(out, "w") as fh:
            json.dump(session.report.to_dict(), fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = sys.argv[2]
    mp.spawn(worker, args=(sys.argv[1],), nprocs=2)
