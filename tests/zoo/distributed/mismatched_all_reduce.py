# Each rank all-reduces a different tensor at a different line: the calls pair up, nothing
# hangs, and each rank silently receives the sum of two different quantities.
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
loss_sum = torch.ones(1)
count = torch.ones(1)
if rank == 0:
    dist.all_reduce(loss_sum)
else:
    dist.all_reduce(count)
dist.destroy_process_group()
