# DDP replicas that must stay equal, or a hand-written gradient sync, on two gloo ranks. The first
# argument picks how the loop is written:
#   clean     a correct DDP loop                         cast      model.double() after wrapping
#   bypass    model.module(x) called for training        summed    all_reduce(p.grad) never divided
#   averaged  all_reduce(p.grad) then / world_size (correct)
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def main(mode):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    model = net if mode in ("summed", "averaged") else DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
    for step in range(8):
        x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
        if mode == "cast" and step == 3:
            model.double()  # CAST
        if mode == "cast" and step >= 3:
            x = x.double()
        out = model.module(x) if mode == "bypass" and step >= 2 else model(x)  # BYPASS
        loss = F.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        if mode in ("summed", "averaged"):
            for p in model.parameters():
                dist.all_reduce(p.grad)  # SUMMED
                if mode == "averaged":
                    p.grad /= world
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "clean")
