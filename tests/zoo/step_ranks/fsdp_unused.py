# FSDP2 (fully_shard) on CPU with gloo. With the argument "unused", the extra layer's output is
# detached in forward, so its sharded parameters never get a gradient.
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard


class Net(nn.Module):
    def __init__(self, unused):
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.extra = nn.Linear(8, 8)
        self.head = nn.Linear(8, 1)
        self.unused = unused

    def forward(self, x):
        h = torch.relu(self.body(x))
        if self.unused:
            h = h + self.extra(h).detach()  # UNUSED
        else:
            h = h + self.extra(h)
        return self.head(h)


dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
torch.manual_seed(0)
model = Net(sys.argv[1:] == ["unused"])
for layer in (model.body, model.extra, model.head):
    fully_shard(layer)
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(rank)
for step in range(5):
    x = torch.randn(8, 4, generator=g)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
