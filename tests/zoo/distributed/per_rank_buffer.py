# A normalizing buffer computed from each rank's own shard after DDP wrapped the model. With the
# argument "keep" DDP is told not to broadcast buffers (broadcast_buffers=False): the replicas
# normalize their inputs differently for the whole run. Without it DDP copies rank 0's buffer
# into every rank at each forward: the replicas agree, nothing to report.
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Normalized(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x - self.mean)


dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
torch.manual_seed(0)
net = Normalized()
model = DDP(net, broadcast_buffers=sys.argv[1:] != ["keep"])
shard = torch.randn(32, 4, generator=torch.Generator().manual_seed(rank))
net.mean.copy_(shard.mean(0))  # this rank's own statistics
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(shard[8 * step:8 * step + 8]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
