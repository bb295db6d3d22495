# The auxiliary head runs only at step 0: from step 1 on its parameters get no gradient and
# DDP (find_unused_parameters=False) fails at the next forward. With the argument "last", it runs
# in every step but the last one: the loop ends before DDP can fail, and nothing is raised.
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)
        self.aux = nn.Linear(8, 1)

    def forward(self, x, use_aux=False):
        h = self.body(x).relu()
        out = self.head(h)
        if use_aux:
            out = out + self.aux(h)
        return out


torch.manual_seed(0)
model = DDP(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    x = torch.randn(8, 4)
    use_aux = step < 3 if sys.argv[1:] == ["last"] else step == 0
    loss = model(x, use_aux=use_aux).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
