# Data parallel by hand (no DDP): gradients are averaged with all_reduce, but each rank seeds
# its own initialisation, so the replicas start from different weights and never agree.
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
torch.manual_seed(rank)  # a different initialisation on each rank
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    opt.step()
dist.destroy_process_group()
