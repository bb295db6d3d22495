# A loss divided by a count summed over the ranks, on two gloo ranks with different numbers of
# valid targets per rank. The first argument:
#   ddp     a masked loss divided by the global count of valid targets, then DDP averages (1/world)
#   quiet   the same loss times the world size under DDP, and a model without DDP whose gradients
#           are summed by hand (both give the global mean's gradient)
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def masked_sum(logits, y, mask):
    return (F.cross_entropy(logits, y, reduction="none") * mask).sum()


def main(mode):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Linear(6, 4))
    plain = nn.Linear(6, 4)
    opt = torch.optim.SGD(list(model.parameters()) + list(plain.parameters()), lr=0.1)
    g = torch.Generator().manual_seed(10 + rank)
    for step in range(5):
        x, y = torch.randn(12, 6, generator=g), torch.randint(0, 4, (12,), generator=g)
        mask = (torch.arange(12) < 4 + 6 * rank).float()
        valid = mask.sum().reshape(1)
        dist.all_reduce(valid)  # GLOBAL_COUNT
        opt.zero_grad()
        if mode == "ddp":
            loss = masked_sum(model(x), y, mask) / valid[0]
        else:
            loss = masked_sum(model(x), y, mask) * world / valid[0]
        loss.backward()
        if mode == "quiet":
            own = masked_sum(plain(x), y, mask) / valid[0]
            own.backward()
            for p in plain.parameters():
                dist.all_reduce(p.grad)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "quiet")
